/**
 * The soak's invariant checker: after the load stopped and the queues drained, it reads the
 * database and the fakes (and what the load generator recorded) and names every broken invariant
 * with examples. Each check is one function; `checkAll` runs them all.
 */
import pg from 'pg';
import type { Fakes } from './soak-setup.js';
import type { LoadRecord } from './soak-load.js';

export interface Verdict {
  invariant: string;
  ok: boolean;
  /** What was checked, in numbers. */
  measured: string;
  /** Up to a few examples when broken. */
  examples: string[];
}

const few = <T>(xs: T[], f: (x: T) => string = (x) => JSON.stringify(x)) => xs.slice(0, 5).map(f);

/** Cluster-scoped jobs: one round per slot cluster-wide. Rounds that ran hold a fencing token. */
export async function slotsOnce(sql: pg.Pool, clusterJobs: string[]): Promise<Verdict> {
  const { rows } = await sql.query(
    `SELECT job_name, slot, count(*)::int AS n, array_agg(instance_id || ':' || status ORDER BY started_at) AS who
       FROM job_runs WHERE job_name = ANY($1) AND fencing_token IS NOT NULL AND status NOT LIKE 'skipped%'
      GROUP BY job_name, slot HAVING count(*) > 1 ORDER BY slot`,
    [clusterJobs],
  );
  const total = (await sql.query(`SELECT count(DISTINCT (job_name, slot))::int AS n FROM job_runs WHERE job_name = ANY($1) AND fencing_token IS NOT NULL`, [clusterJobs])).rows[0].n;
  return { invariant: 'no slot ran twice', ok: rows.length === 0, measured: `${total} slots of ${clusterJobs.length} cluster jobs; ${rows.length} ran more than once`, examples: few(rows) };
}

export async function usageExactlyOnce(sql: pg.Pool, rec: LoadRecord, tag: string): Promise<Verdict> {
  const { rows } = await sql.query(`SELECT request_id, count(*)::int AS n FROM usage_logs WHERE request_id LIKE $1 GROUP BY request_id`, [`${tag}-%`]);
  const stored = new Map<string, number>(rows.map((r) => [r.request_id as string, r.n as number]));
  const lost = [...rec.acked].filter((id) => !stored.has(id));
  const twice = [...stored].filter(([, n]) => n > 1);
  // The rollups: no hour counts more of the run's events than its raw rows hold (a batch rolled up twice would).
  const roll = await sql.query(
    `SELECT h.bucket, h.rolled, coalesce(r.raw, 0) AS raw
       FROM (SELECT bucket, sum(requests)::bigint AS rolled FROM usage_hourly WHERE model = 'soak-model' GROUP BY bucket) h
       LEFT JOIN (SELECT date_trunc('hour', created_at) AS bucket, count(*)::bigint AS raw FROM usage_logs WHERE model = 'soak-model' AND request_id LIKE $1 GROUP BY 1) r ON r.bucket = h.bucket`,
    [`${tag}-%`],
  );
  const over = roll.rows.filter((r) => Number(r.rolled) > Number(r.raw));
  const rolled = roll.rows.reduce((s, r) => s + Number(r.rolled), 0);
  const raw = roll.rows.reduce((s, r) => s + Number(r.raw), 0);
  const rollOk = over.length === 0;
  return {
    invariant: 'no acknowledged usage event lost or counted twice',
    ok: lost.length === 0 && twice.length === 0 && rollOk,
    measured: `${rec.acked.size} acknowledged of ${rec.usageSent} sent, ${stored.size} stored; lost ${lost.length}, stored twice ${twice.length}; hours rolled up: ${rolled} events, raw rows in those hours ${raw}`,
    examples: [
      ...few(lost, (id) => `lost ${id}`),
      ...few(twice, ([id, n]) => `${id} stored ${n}×`),
      ...few(over, (r) => `hour ${(r.bucket as Date).toISOString()}: rolled up ${r.rolled}, raw ${r.raw}`),
    ],
  };
}

/** Invariant 5: each user's balance + frozen = start − captured; every batch one hold and one settlement; captures = produced. */
export async function moneyConserved(sql: pg.Pool, users: Map<number, number>): Promise<Verdict> {
  const bad: string[] = [];
  const per = await sql.query(`SELECT u.id, u.balance, u.frozen_balance, coalesce((SELECT sum(captured) FROM image_batches b WHERE b.user_id = u.id), 0) AS captured FROM billing_users u`);
  for (const r of per.rows) {
    const start = users.get(Number(r.id));
    if (start === undefined) continue;
    if (Number(r.frozen_balance) !== 0) bad.push(`user ${r.id}: ${r.frozen_balance} still frozen`);
    if (Number(r.balance) + Number(r.frozen_balance) !== start - Number(r.captured))
      bad.push(`user ${r.id}: balance ${r.balance} + frozen ${r.frozen_balance} ≠ start ${start} − captured ${r.captured}`);
  }
  const money = await sql.query(`
    SELECT b.id, b.state, b.hold_amount, b.captured,
           count(*) FILTER (WHERE m.step = 'hold')::int AS holds, count(*) FILTER (WHERE m.step IN ('capture', 'release'))::int AS settles,
           coalesce(sum(m.amount) FILTER (WHERE m.step = 'capture'), 0) AS capture, coalesce(sum(m.refunded) FILTER (WHERE m.step IN ('capture', 'release')), 0) AS refunded
      FROM image_batches b LEFT JOIN image_batch_money m ON m.batch_id = b.id GROUP BY b.id`);
  for (const r of money.rows) {
    if (r.holds !== 1 || r.settles !== 1) bad.push(`batch ${r.id} (${r.state}): ${r.holds} holds, ${r.settles} settlements`);
    else if (Number(r.capture) + Number(r.refunded) !== Number(r.hold_amount)) bad.push(`batch ${r.id}: capture ${r.capture} + refund ${r.refunded} ≠ hold ${r.hold_amount}`);
  }
  const sums = await sql.query(`SELECT (SELECT coalesce(sum(amount), 0) FROM image_batch_money WHERE step = 'capture') AS captured,
      (SELECT coalesce(sum(r.images * b.price_per_image), 0) FROM image_batch_results r JOIN image_batches b ON b.id = r.batch_id WHERE r.status = 'succeeded' AND b.state IN ('completed', 'cancelled')) AS produced`);
  const { captured, produced } = sums.rows[0];
  if (Number(captured) !== Number(produced)) bad.push(`captured ${captured} ≠ succeeded images × price ${produced}`);
  return { invariant: 'money conserved to the cent', ok: bad.length === 0, measured: `${users.size} users, ${money.rows.length} image batches, captured ${captured}`, examples: bad.slice(0, 5) };
}

/** Rotating providers (OpenAI, Anthropic): a refresh token is single-use. Google's do not rotate: none refused is checked instead. */
export function refreshTokensOnce(f: Fakes): Verdict {
  const counts = new Map<string, number>();
  for (const p of f.openai.presented) if (p.refreshToken) counts.set(`openai ${p.refreshToken}`, (counts.get(`openai ${p.refreshToken}`) ?? 0) + 1);
  for (const r of f.anthropic.requests) {
    if (r.path !== '/v1/oauth/token') continue;
    const rt = (JSON.parse(r.body || '{}') as { refresh_token?: string }).refresh_token;
    if (rt) counts.set(`anthropic ${rt}`, (counts.get(`anthropic ${rt}`) ?? 0) + 1);
  }
  const twice = [...counts].filter(([, n]) => n > 1);
  const googleRefused = f.google.refusals;
  return {
    invariant: 'no refresh token presented twice',
    ok: twice.length === 0 && googleRefused === 0,
    measured: `${counts.size} rotating refresh tokens presented (OpenAI ${f.openai.successes} rotations, reuses refused ${f.openai.reuses}; Anthropic ${f.anthropic.successes}); Google ${f.google.successes} refreshes, ${googleRefused} refused`,
    examples: few(
      twice,
      ([k, n]) =>
        `${k.slice(0, 24)}… presented ${n}× (${
          k.startsWith('openai')
            ? f.openai.presented
                .filter((p) => `openai ${p.refreshToken}` === k)
                .map((p) => p.outcome)
                .join(',')
            : 'anthropic'
        })`,
    ),
  };
}

/** An account must have refreshed once its first refresh was due this long before the replicas stopped (a refresh may wait out a fault; the token stays valid `auth.refresh_margin_seconds` past its due time). */
export const REFRESH_DUE_SLACK_MS = 60_000;

/**
 * No active account's access token lapsed, and every account whose first refresh fell due at
 * least `REFRESH_DUE_SLACK_MS` before `stoppedAt` refreshed at least once (one due later may
 * still be waiting out the last faults at the end of a short run: its token has not lapsed, which
 * the lapse samples check). One end state is the documented answer to a fault, not a lapse: an
 * account whose refresh was in flight on a replica SIGKILLed before it stored the rotation is
 * `expired` with `rotation_lost_in_crash` (its rotating refresh token is not presented again:
 * docs/token-refresh.md). Those are counted apart, and only while the schedule SIGKILLed a replica.
 */
export async function noLapse(sql: pg.Pool, rec: LoadRecord, accounts: ReadonlyArray<{ id: number; firstRefreshDueMs: number }>, stoppedAt: number, sigkills = 0): Promise<Verdict> {
  const { rows: unrefreshed } = await sql.query<{ id: string; lost: boolean }>(
    `SELECT id, coalesce(status = 'expired' AND last_refresh_error = 'rotation_lost_in_crash', false) AS lost FROM accounts WHERE last_refresh_success_at IS NULL`,
  );
  const dueOf = new Map(accounts.map((a) => [a.id, a.firstRefreshDueMs]));
  const late = unrefreshed.filter((r) => !(r.lost && sigkills > 0) && (dueOf.get(Number(r.id)) ?? 0) < stoppedAt - REFRESH_DUE_SLACK_MS);
  const dueAtEnd = unrefreshed.filter((r) => !(r.lost && sigkills > 0) && (dueOf.get(Number(r.id)) ?? 0) >= stoppedAt - REFRESH_DUE_SLACK_MS).length;
  const notActive = (
    await sql.query<{ status: string; lost: boolean; n: number; example: string | null }>(
      `SELECT status, coalesce(last_refresh_error = 'rotation_lost_in_crash', false) AS lost, count(*)::int AS n, min(last_refresh_error) AS example
         FROM accounts WHERE status <> 'active' GROUP BY 1, 2`,
    )
  ).rows;
  const lost = notActive.filter((r) => r.status === 'expired' && r.lost && sigkills > 0).reduce((n, r) => n + r.n, 0);
  const other = notActive.filter((r) => !(r.status === 'expired' && r.lost && sigkills > 0));
  const ids = new Set(rec.lapses.flatMap((l) => l.ids));
  const refreshed = accounts.length - unrefreshed.length;
  // What the database says about the first few left unrefreshed: the starting point of a diagnosis.
  const lateIds = late.slice(0, 5).map((r) => r.id);
  const states = new Map(
    (
      await sql.query<{ id: string; state: string }>(
        `SELECT id, format('status %s, version %s, failures %s, attempted %s, error %s, created %s, updated %s, expires %s', status, token_version, refresh_failures,
                coalesce(last_refresh_attempt_at::text, 'never'), coalesce(last_refresh_error, '-'), created_at, updated_at, token_expires_at) AS state
           FROM accounts WHERE id = ANY($1::bigint[])`,
        [lateIds],
      )
    ).rows.map((r) => [r.id, r.state]),
  );
  return {
    invariant: 'no access token lapsed while its account was active (and every account due refreshed)',
    ok: ids.size === 0 && late.length === 0 && other.length === 0,
    measured: `${rec.lapses.length} samples (every 5 s) with a lapsed active account, ${ids.size} accounts; ${refreshed} of ${accounts.length} accounts refreshed at least once, ${late.length} not refreshed though due ${REFRESH_DUE_SLACK_MS / 1000} s or more before the replicas stopped, ${dueAtEnd} due later and not yet refreshed (their tokens valid); expired by a rotation lost to a SIGKILL mid-refresh (the documented end state): ${lost}; otherwise not active: ${JSON.stringify(other)}`,
    examples: [
      ...few(rec.lapses, (l) => `at ${new Date(l.at).toISOString()}: accounts ${l.ids.slice(0, 8).join(', ')}`),
      ...late.slice(0, 5).map((r) => `account ${r.id} due at ${new Date(dueOf.get(Number(r.id)) ?? 0).toISOString()} never refreshed (${states.get(r.id) ?? 'row gone'})`),
    ],
  };
}

/** A reader is excused this long after a PostgreSQL or PgBouncer restart ended: its pool reconnects, its next high-water read comes (within about 2 s). */
export const EPOCH_OUTAGE_GRACE_MS = 5000;

/**
 * Per bucket: one replica's answers never go back (always broken), and across replicas an answer
 * sent `toleranceMs` or more after another replica's newer answer came back never carries an older
 * epoch: the bound of docs/scheduler-snapshot.md, `snapshot.read_max_age` (the soak's replicas run
 * the default, 100 ms). Send and arrival times bracket the replicas' own, so the check is sound.
 * Its one documented exception: a replica that cannot read PostgreSQL is held only to the last
 * high-water it read, so a read sent during `pgOutages` (a PostgreSQL or PgBouncer restart, plus
 * `EPOCH_OUTAGE_GRACE_MS`) is counted apart, not as broken.
 */
export function epochsForward(rec: LoadRecord, toleranceMs = 100, pgOutages: { from: number; to: number }[] = []): Verdict {
  const own: string[] = [];
  const cross: string[] = [];
  let within = 0;
  let excused = 0;
  let maxLag = 0;
  const inOutage = (t: number) => pgOutages.some((o) => t >= o.from && t <= o.to + EPOCH_OUTAGE_GRACE_MS);
  for (const platform of new Set(rec.epochs.map((e) => e.platform))) {
    const reads = rec.epochs.filter((e) => e.platform === platform).sort((a, b) => a.sent - b.sent);
    const byArrival = [...reads].sort((a, b) => a.at - b.at);
    const last = new Map<string, (typeof reads)[number]>();
    let j = 0;
    let best: (typeof reads)[number] | null = null;
    for (const r of reads) {
      for (; j < byArrival.length && byArrival[j]!.at < r.sent; j++) {
        const a = byArrival[j]!;
        const prev = last.get(a.replica);
        if (prev && a.epoch < prev.epoch) own.push(`${platform}: ${a.replica} answered ${a.epoch} (${a.source}) after its own ${prev.epoch} (${prev.source})`);
        if (!prev || a.epoch >= prev.epoch) last.set(a.replica, a);
        if (!best || a.epoch > best.epoch) best = a;
      }
      if (!best || r.epoch >= best.epoch) continue;
      const lag = r.sent - best.at;
      maxLag = Math.max(maxLag, lag);
      if (lag < toleranceMs) within++;
      else if (inOutage(r.sent)) excused++;
      else cross.push(`${platform}: ${r.replica} answered ${r.epoch} (${r.source}) at ${new Date(r.sent).toISOString()}, ${lag} ms after ${best.replica} had answered ${best.epoch} (${best.source})`);
    }
  }
  return {
    invariant: 'snapshot epochs never went back',
    ok: own.length === 0 && cross.length === 0,
    measured: `${rec.epochs.length} snapshot reads on every replica; a replica behind its own earlier answer: ${own.length}; behind another replica's answer by ${toleranceMs} ms or more: ${cross.length} (longest ${maxLag} ms); within ${toleranceMs} ms: ${within}; during a PostgreSQL outage (excused): ${excused}`,
    examples: [...own.slice(0, 3), ...cross.slice(0, 4)],
  };
}

export function healthyAfterFaults(lastFaultEnd: number, healthyAt: number | null, unhealthy: string[]): Verdict {
  const ms = healthyAt === null ? null : Math.max(0, healthyAt - lastFaultEnd);
  return {
    invariant: 'every job healthy within 2 minutes of the last fault',
    ok: ms !== null && ms <= 120_000,
    measured: ms === null ? 'not every job healthy within the wait' : `every job healthy ${(ms / 1000).toFixed(1)} s after the last fault ended`,
    examples: unhealthy.slice(0, 8),
  };
}

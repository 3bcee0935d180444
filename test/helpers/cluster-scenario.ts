// The cluster scenario of invariants 1, 2 and 4, shared by the end-to-end files that run it on
// different paths to PostgreSQL (direct, or through PgBouncer with a direct session): three
// `relay-jobs start` replicas share a canary every second; the leader is SIGKILLed mid-round;
// Redis is stopped until rounds have run on the PostgreSQL fallback, and started again; then every
// replica gets SIGTERM. Each phase waits for what it needs (never a fixed time). The
// database records are the evidence, asserted here; the caller gets them for its own checks.
import { expect } from 'vitest';
import type { ServiceProcess } from './cli.js';
import type { Cluster } from './cluster.js';
import { waitFor } from './wait.js';

export const INTERVAL = 1000;
export const LOCK_TTL = 3000;
/** Long, so a shutdown that waits for the grace to run out is far from one that needs no wait. */
export const GRACE = 30_000;

export interface CanaryRound {
  token: number;
  slot: string;
  instance: string;
  start: number;
  end: number | null;
}

export interface ScenarioOptions {
  /** A cluster started with `replicas: 0` and `migrate: false` (the replicas migrate concurrently, as in production); its Redis is stopped and started again. */
  cluster: Cluster;
  /** Extra environment for every replica (e.g. DATABASE_URL through PgBouncer and DATABASE_DIRECT_URL). */
  env?: Record<string, string>;
}

/** The canary every second, sleeping 400 ms a round, under a 3 s lock TTL. */
export const SCENARIO_ENV: Record<string, string> = {
  // During the Redis outage each running round pins a connection for its advisory lock, beside the
  // liveness session and the rounds' own statements: 5 left no headroom on a loaded 2-core machine.
  RELAY_JOBS__DATABASE__POOL_SIZE: '8',
  RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: '1s',
  RELAY_JOBS__SHUTDOWN__GRACE: `${GRACE}ms`,
  RELAY_JOBS__JOBS__CANARY__ENABLED: 'true',
  RELAY_JOBS__JOBS__CANARY__EVERY: `${INTERVAL}ms`,
  RELAY_JOBS__JOBS__CANARY__SLEEP: '400ms',
  RELAY_JOBS__JOBS__CANARY__TIMEOUT: '2s',
  RELAY_JOBS__JOBS__CANARY__LOCK_TTL: `${LOCK_TTL}ms`,
  RELAY_JOBS__JOBS__SESSION_CLEANUP__ENABLED: 'false',
};

export interface ScenarioResult {
  rounds: CanaryRound[];
  killedAt: number;
  victim: ServiceProcess;
  survivors: ServiceProcess[];
  /** The first round after the kill, on another replica. */
  after: CanaryRound;
}

export async function runClusterScenario(o: ScenarioOptions): Promise<ScenarioResult> {
  const { cluster } = o;
  const client = await cluster.sql();
  const redis = cluster.redis!;
  for (let i = 0; i < 3; i++) await cluster.addReplica(`r${i}`, { ...SCENARIO_ENV, ...o.env });
  let replicas = cluster.replicas.map((r) => r.proc);
  const ports = cluster.replicas.map((r) => r.port);
  const dbNow = async () => Number((await client.query(`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS t`)).rows[0].t);
  await Promise.all(replicas.map((r) => r.waitForLine(/relay-jobs started/)));
  const finishedRounds = async (where: string, args: unknown[] = []) =>
    Number((await client.query(`SELECT count(*) AS n FROM job_runs WHERE job_name = 'canary' AND fencing_token IS NOT NULL AND status <> 'running' AND ${where}`, args)).rows[0].n);
  // The canary is in its stride (a few rounds done) before the leader is killed.
  await waitFor(async () => (await finishedRounds('true')) >= 3, { what: 'three finished canary rounds', timeoutMs: 60_000, intervalMs: 100 });

  // SIGKILL whichever replica is in the middle of a round (started 50-250 ms ago: its 400 ms sleep
  // has not ended). A loaded test process can take longer than that to send the kill: when the
  // victim turns out to have had no round running at its death, it is started again and another
  // is picked (its finished rounds are ordinary evidence; no round of it was cut).
  let victim: ServiceProcess | undefined;
  let killedAt = 0;
  for (let attempt = 1; !victim; attempt++) {
    let picked: (typeof cluster.replicas)[number] | undefined;
    for (let i = 0; i < 200 && !picked; i++) {
      const { rows } = await client.query(
        `SELECT instance_id FROM job_runs WHERE job_name = 'canary' AND status = 'running' AND started_at BETWEEN clock_timestamp() - interval '250 milliseconds' AND clock_timestamp() - interval '50 milliseconds'`,
      );
      picked = rows[0] && cluster.replicas.find((r) => r.id === rows[0].instance_id);
      if (!picked) await new Promise((r) => setTimeout(r, 20));
    }
    expect(picked, 'a replica mid-round').toBeDefined();
    // Read before the kill: the takeover through the liveness session can start a survivor's round
    // within milliseconds of the death, before a loaded test process has even seen the exit. The
    // victim's cut round ends at the kill, so a clock read after it could report a false overlap.
    killedAt = await dbNow();
    await picked!.kill('SIGKILL');
    const cut = await client.query(`SELECT 1 FROM job_runs WHERE job_name = 'canary' AND instance_id = $1 AND (status = 'running' OR error LIKE 'abandoned%')`, [picked!.id]);
    if (cut.rowCount! > 0) victim = picked!.proc;
    else {
      expect(attempt, 'a kill that lands mid-round, within five tries').toBeLessThan(5);
      await picked!.restart();
    }
  }
  replicas = cluster.replicas.map((r) => r.proc);
  const survivors = replicas.filter((r) => r !== victim);
  // Failover done: the victim's round is recorded as abandoned and a survivor has finished a round
  // begun after the kill (how soon is asserted from the records below).
  await waitFor(
    async () =>
      (await client.query(`SELECT 1 FROM job_runs WHERE instance_id = $1 AND error LIKE 'abandoned%'`, [victim!.name])).rowCount! > 0 &&
      (await finishedRounds(`instance_id <> $1 AND started_at > to_timestamp($2 / 1000.0)`, [victim!.name, killedAt])) >= 2,
    { what: `failover from ${victim!.name}: its round abandoned, two rounds finished by the survivors`, timeoutMs: 60_000, intervalMs: 100 },
  );

  // Redis down: rounds go on under the PostgreSQL advisory lock; readiness reports it.
  await redis.stop();
  const redisDownAt = await dbNow();
  const readyz = `http://127.0.0.1:${ports[replicas.indexOf(survivors[0]!)]}/readyz`;
  const notReady = await waitFor(
    async () => {
      const res = await fetch(readyz);
      return res.status === 503 && ((await res.json()) as { checks: { redis: string } });
    },
    { what: `${readyz} to report Redis down (503)`, timeoutMs: 30_000, intervalMs: 100 },
  );
  expect(notReady.checks.redis).toMatch(/unreachable/);
  // Rounds go on under the PostgreSQL lock while Redis is down: at least two finish before it returns.
  await waitFor(async () => (await finishedRounds(`lock_backend = 'postgres' AND started_at > to_timestamp($1 / 1000.0)`, [redisDownAt])) >= 2, {
    what: 'two canary rounds on the PostgreSQL fallback during the Redis outage',
    timeoutMs: 60_000,
    intervalMs: 100,
  });
  await redis.start();
  const redisUpAt = await dbNow();
  await waitFor(async () => (await fetch(readyz)).status === 200, { what: `${readyz} ready again after Redis came back`, timeoutMs: 60_000, intervalMs: 100, ignoreErrors: true });
  // Back on Redis: two rounds under the Redis lock again, and enough rounds in all for the evidence below.
  // The skip counts are flushed by each replica's heartbeat; a loaded machine can run twelve rounds
  // with fewer than eleven skips flushed, so the count asserted below is waited for too.
  const skipsFlushed = async () => Number((await client.query(`SELECT coalesce(sum(skipped), 0) AS n FROM job_skip_counts WHERE job_name = 'canary'`)).rows[0].n);
  await waitFor(
    async () => (await finishedRounds(`lock_backend = 'redis' AND started_at > to_timestamp($1 / 1000.0)`, [redisUpAt])) >= 2 && (await finishedRounds('true')) >= 12 && (await skipsFlushed()) > 10,
    {
      what: 'two canary rounds on Redis after it came back, twelve in all, more than ten skips counted',
      timeoutMs: 60_000,
      intervalMs: 100,
    },
  );

  // SIGTERM all: each exits 0 with its shutdown done before the grace ran out: a rung still running
  // then, or connections cut then, is logged with "grace period".
  const t0 = Date.now();
  for (const r of survivors) r.proc.kill('SIGTERM');
  const codes = await Promise.all(survivors.map((r) => r.exited));
  const exitMs = Date.now() - t0;
  expect(codes).toEqual([0, 0]);
  for (const r of survivors)
    expect(
      r.lines.filter((l) => /grace period/.test(l)),
      `${r.name}'s shutdown`,
    ).toEqual([]);
  // 10 s: between a shutdown that waits for nothing (a second or two) and the 30 s grace.
  expect(exitMs, `exited ${exitMs} ms after SIGTERM`).toBeLessThan(10_000);
  console.log(`cluster-scenario: both survivors exited ${exitMs} ms after SIGTERM (grace ${GRACE} ms)`);

  // ---- the evidence ----
  const dup = await client.query(`SELECT slot, count(*) FROM job_runs WHERE job_name = 'canary' AND fencing_token IS NOT NULL AND trigger = 'schedule' GROUP BY slot HAVING count(*) > 1`);
  expect(dup.rows, 'a slot ran twice').toEqual([]);
  const dupStart = await client.query(`SELECT slot, count(*) FROM canary_runs WHERE phase = 'start' GROUP BY slot HAVING count(*) > 1`);
  expect(dupStart.rows, 'a canary slot started twice').toEqual([]);

  const { rows } = await client.query(`
    SELECT r.fencing_token::int AS token, r.slot::text AS slot, r.instance_id AS instance,
           extract(epoch FROM s.at) * 1000 AS start, extract(epoch FROM e.at) * 1000 AS "end", extract(epoch FROM r.finished_at) * 1000 AS finished
      FROM job_runs r
      JOIN canary_runs s ON s.fencing_token = r.fencing_token AND s.phase = 'start'
      LEFT JOIN canary_runs e ON e.fencing_token = r.fencing_token AND e.phase = 'end'
     WHERE r.job_name = 'canary' AND r.fencing_token IS NOT NULL ORDER BY s.at`);
  const rounds: CanaryRound[] = rows.map((r) => ({
    token: r.token,
    slot: r.slot,
    instance: r.instance,
    start: Number(r.start),
    // A round with no end row was cut short: by SIGKILL (ends at the kill), or by shutdown/lease loss (ends when recorded).
    end: r.end !== null ? Number(r.end) : r.instance === victim!.name ? killedAt : r.finished === null ? null : Number(r.finished),
  }));
  expect(rounds.length).toBeGreaterThan(10);
  for (let i = 1; i < rounds.length; i++) {
    const prev = rounds[i - 1]!;
    const cur = rounds[i]!;
    expect(cur.token, 'fencing tokens grow with time').toBeGreaterThan(prev.token);
    expect(prev.end, `round ${prev.token} has an end`).not.toBeNull();
    expect(cur.start, `round ${cur.token} (${cur.instance}) overlapped round ${prev.token} (${prev.instance})`).toBeGreaterThanOrEqual(prev.end!);
  }

  // Failover: another replica ran within lock TTL + one interval of the kill (plus scheduling slack).
  const after = rounds.find((r) => r.start > killedAt && r.instance !== victim!.name);
  expect(after, 'a round after the kill').toBeDefined();
  expect(after!.start - killedAt).toBeLessThanOrEqual(LOCK_TTL + INTERVAL + 1000);
  const abandoned = await client.query(`SELECT count(*)::int AS n FROM job_runs WHERE instance_id = $1 AND error LIKE 'abandoned%'`, [victim!.name]);
  expect(abandoned.rows[0].n).toBe(1);

  // Redis outage: rounds went on under the PostgreSQL advisory lock, still one per slot.
  const pgRounds = await client.query(
    `SELECT count(*)::int AS n FROM job_runs WHERE job_name = 'canary' AND lock_backend = 'postgres' AND fencing_token IS NOT NULL
       AND started_at BETWEEN to_timestamp($1 / 1000.0) AND to_timestamp($2 / 1000.0)`,
    [redisDownAt, redisUpAt],
  );
  const during = await client.query(
    `SELECT instance_id, status, lock_backend, slot::text, started_at::text, error, note FROM job_runs WHERE job_name = 'canary' AND started_at BETWEEN to_timestamp($1 / 1000.0) - interval '2 s' AND to_timestamp($2 / 1000.0) + interval '2 s' ORDER BY started_at`,
    [redisDownAt, redisUpAt],
  );
  expect(
    pgRounds.rows[0].n,
    `rounds around the outage: ${JSON.stringify(during.rows)}\n${survivors
      .map(
        (r) =>
          `${r.name}:\n${r.lines
            .filter((l) => /"level":(40|50)/.test(l))
            .slice(-25)
            .join('\n')}`,
      )
      .join('\n')}`,
  ).toBeGreaterThanOrEqual(2);

  // Skipped scheduled rounds are counted per replica with the reason (summarised by the heartbeat and
  // at shutdown), so "not leader" is never mistaken for "stuck", and cost no write per slot.
  const skips = await client.query(`SELECT instance_id, skipped::int AS n, last_reason FROM job_skip_counts WHERE job_name = 'canary'`);
  expect(skips.rows.length).toBeGreaterThan(0);
  expect(skips.rows.reduce((n, s) => n + s.n, 0)).toBeGreaterThan(10);
  for (const s of skips.rows) expect(s.last_reason).toMatch(/held by|already claimed|lease held|claim lost to a concurrent replica/);
  const perSlot = await client.query(`SELECT count(*)::int AS n FROM job_runs WHERE job_name = 'canary' AND status = 'skipped_not_leader' AND trigger = 'schedule'`);
  expect(perSlot.rows[0].n, 'a skipped slot was written as a record').toBe(0);

  const stopped = await client.query(`SELECT instance_id FROM instances WHERE stopped_at IS NOT NULL ORDER BY instance_id`);
  expect(stopped.rows.map((r) => r.instance_id)).toEqual(survivors.map((r) => r.name).sort());
  return { rounds, killedAt, victim: victim!, survivors, after: after! };
}

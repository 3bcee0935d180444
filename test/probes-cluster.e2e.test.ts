import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { ServiceProcess } from './helpers/cli.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { ChatUpstream, type ProbeHit } from './fixtures/chat-upstream.js';
import { holdFor } from './helpers/wait.js';

/**
 * Once per interval, cluster-wide, with real processes: three `relay-jobs start` replicas share
 * a few hundred monitors at a 2 s interval and account-test plans due every 2 s; one replica is
 * SIGKILLed mid-run and Redis is stopped for a few seconds. The loopback upstream's own records
 * are the evidence for the probes; the result table's unique occurrence is the evidence for tests.
 */
const MONITORS = 200;
const INTERVAL = 2000;
const TIMEOUT = 1000;
const GRACE = 2000;
const PLANS = 6;

describe('fleet probes across three real replicas', () => {
  let cluster: Cluster;
  let client: pg.Client;
  let up: ChatUpstream;
  let codex: FakeOAuthServer;
  const replicas: ServiceProcess[] = [];

  beforeAll(async () => {
    up = await ChatUpstream.start();
    up.setDefault({ mode: 'ok', latencyMs: [20, 300] });
    up.addApiKey(...Array.from({ length: MONITORS }, (_, m) => `key-${m}`)); // the monitors' keys, below
    codex = await FakeOAuthServer.start();
    codex.setDefaultBehaviour({ mode: 'ok', latencyMs: 100 });
    cluster = await startCluster({
      replicas: ['p0', 'p1', 'p2'],
      migrate: false,
      waitStarted: false,
      env: {
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__SHUTDOWN__GRACE: '5s',
        RELAY_JOBS__LOGGING__LEVEL: 'warn',
        RELAY_JOBS__CHANNEL_MONITOR__MIN_INTERVAL: '1s',
        RELAY_JOBS__CHANNEL_MONITOR__POLL_INTERVAL: '200ms',
        RELAY_JOBS__CHANNEL_MONITOR__LEASE_GRACE: `${GRACE}ms`,
        // The plans' accounts are ChatGPT accounts: their tests go to the strict Codex fake.
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__API_URL: codex.apiUrl,
        RELAY_JOBS__SCHEDULED_ACCOUNT_TEST__POLL_INTERVAL: '200ms',
        RELAY_JOBS__SCHEDULED_ACCOUNT_TEST__TIMEOUT: `${TIMEOUT}ms`,
      },
    });
    replicas.push(...cluster.replicas.map((r) => r.proc));
    client = await cluster.sql();
  });
  afterAll(async () => {
    await cluster?.stop();
    await up?.close();
    await codex?.close();
  });

  const api = (i: number, path: string, body?: unknown) => cluster.api(i, path, { body, headers: { 'content-type': 'application/json' } });

  it('each monitor once per interval, never twice, never overlapping; survivors take over a killed replica within an interval; each test occurrence stored once', async () => {
    for (let i = 0; i < 3; i++) await cluster.replica(i).waitHealthy('/healthz');

    // Monitors with phases spread over one interval; plans on their own accounts, due every 2 s.
    const created = await Promise.all(
      Array.from({ length: MONITORS }, (_, m) =>
        api(m % 3, '/monitors', { name: `m${m}`, base_url: up.url, model: 'gpt-probe', api_key: `key-${m}`, interval: `${INTERVAL}ms`, timeout: `${TIMEOUT}ms`, jitter: `${INTERVAL}ms` }),
      ),
    );
    const failed = created.filter((r) => r.status !== 201);
    expect(
      failed.length,
      `${failed.length} creates failed: ${failed[0] && (await failed[0].text())} ${replicas.flatMap((r) => r.lines.filter((l) => l.includes('failed')).slice(-3)).join('\n')}`,
    ).toBe(0);
    for (let p = 0; p < PLANS; p++) {
      const acct = await api(p % 3, '/accounts', { platform: 'openai', name: `acct${p}`, credentials: codex.issue(`plan-${p}`, 3600) });
      expect(acct.status, await acct.clone().text()).toBe(201);
      const plan = await api(p % 3, '/account-tests', { account_id: ((await acct.json()) as { id: number }).id, cron: '*/2 * * * * *', model: 'gpt-test', max_results: 1000 });
      expect(plan.status, await plan.clone().text()).toBe(201);
    }
    const t0 = Date.now() + INTERVAL; // every monitor is due within its first interval
    // The holds below are the phases of one observation window, [t0, t1): about nine 2 s slots in
    // which every monitor's probes are counted. They are not waits for an event: the per-monitor
    // lower bound allows three slots (the window's edges and a probe lost with the killed lease),
    // so a shorter window would prove less (at six slots, half of them could pass unprobed).
    await holdFor(INTERVAL + 5000, 'the observation window before the kill: every monitor due within its first interval, then 5 s of probing');

    // SIGKILL one replica mid-probe (the upstream holds probes 20-300 ms, so some are in flight).
    const victim = replicas[1]!;
    victim.proc.kill('SIGKILL');
    await victim.exited;
    const killedAt = Date.now();
    await holdFor(5000, 'the window after the kill: the survivors probe without the victim (its lease ends within timeout + grace)');

    // Redis down for four seconds: the claim lives in PostgreSQL, so probing goes on.
    await cluster.redis!.stop();
    const redisDownAt = Date.now();
    await holdFor(4000, 'the Redis outage of the window: probing goes on from PostgreSQL for two slots');
    await cluster.redis!.start();
    const redisUpAt = Date.now();
    await holdFor(4000, 'the end of the window, Redis back: two more slots');
    const t1 = Date.now();
    for (const r of replicas) if (r !== victim) r.proc.kill('SIGTERM');
    const codes = await Promise.all(replicas.filter((r) => r !== victim).map((r) => r.exited));
    const why = replicas.filter((r) => r !== victim && r.proc.exitCode !== 0).map((r) => `${r.name} exited ${r.proc.exitCode}:\n${r.lines.slice(-15).join('\n')}`);
    expect(codes, why.join('\n')).toEqual([0, 0]);

    // ---- the evidence (the upstream's own records) ----
    const overlaps = up.overlapping.filter((o) => o.next.start >= t0 && o.next.start < t1);
    const gone = [...up.hits.values()].flat().filter((h) => h.gone).length;
    expect(overlaps.length, `a monitor or plan probed while its previous probe was still open (kill at ${killedAt - t0} ms, t0 ${t0}): ${JSON.stringify(overlaps)}`).toBe(0);
    const slots = Math.floor((t1 - t0) / INTERVAL);
    // Slots that passed unprobed are recorded on the next probe's row (`missed`): on a loaded machine some are, and they must be accounted for, never silent.
    const missedRows = await client.query(
      `SELECT m.name, COALESCE(sum(r.missed), 0)::int AS missed FROM monitors m LEFT JOIN monitor_results r ON r.monitor_id = m.id
         AND r.scheduled_for >= to_timestamp($1 / 1000.0) AND r.scheduled_for < to_timestamp($2 / 1000.0) GROUP BY m.name`,
      [t0, t1],
    );
    const missed = new Map<string, number>(missedRows.rows.map((r) => [r.name as string, r.missed as number]));
    const counts: number[] = [];
    let pickedUp = 0;
    for (let m = 0; m < MONITORS; m++) {
      // A slot belongs to the window by its due time (a late probe of an earlier slot is not this window's).
      const hits = (up.hits.get(`key-${m}`) ?? []).filter((h) => Date.parse(h.slot!) >= t0 && Date.parse(h.slot!) < t1);
      const seen = new Set(hits.map((h) => h.slot));
      expect(seen.size, `monitor ${m}: a slot probed twice`).toBe(hits.length);
      // ±1 at the edges of the window; a probe in flight on the killed replica is lost with its lease (timeout + grace).
      expect(hits.length, `monitor ${m}: ${hits.length} probes in ${slots} intervals`).toBeLessThanOrEqual(slots + 1);
      const accounted = hits.length + missed.get(`m${m}`)!;
      expect(accounted, `monitor ${m}: ${hits.length} probes + ${missed.get(`m${m}`)} recorded missed in ${slots} intervals`).toBeGreaterThanOrEqual(
        slots - 1 - Math.ceil((TIMEOUT + GRACE) / INTERVAL),
      );
      counts.push(hits.length);
      // Survivors pick it up: a probe starts within one interval of the kill (plus the lease for one in flight there, plus slack on a loaded machine).
      if (hits.some((h: ProbeHit) => h.start > killedAt && h.start <= killedAt + INTERVAL + TIMEOUT + GRACE + 3000)) pickedUp++;
    }
    expect(pickedUp).toBe(MONITORS);
    // Redis was down, and probing went on at the same rate.
    const during = [...up.hits.entries()]
      .filter(([k]) => k.startsWith('key-'))
      .flatMap(([, h]) => h)
      .filter((h) => h.start >= redisDownAt && h.start < redisUpAt).length;
    // (Every slot in the window, the outage included, is already accounted for per monitor above.)
    expect(during).toBeGreaterThan(0);
    // Every probe the upstream answered was authenticated: no monitor's key was refused.
    const refused = await client.query(`SELECT count(*)::int AS n FROM monitor_results WHERE error_class = 'auth'`);
    expect(refused.rows[0].n).toBe(0);
    const spread = await client.query(`SELECT instance_id, count(*)::int AS n FROM monitor_results GROUP BY instance_id ORDER BY instance_id`);
    expect(spread.rows.map((r) => r.instance_id)).toEqual(['p0', 'p1', 'p2']);
    const histogram = counts.reduce<Record<number, number>>((a, n) => ((a[n] = (a[n] ?? 0) + 1), a), {});
    const totalMissed = [...missed.values()].reduce((a, b) => a + b, 0);
    console.log(
      `probes per monitor in ${slots} intervals: ${JSON.stringify(histogram)}; recorded missed ${totalMissed}; requests the upstream read after their client hung up ${gone}; overlaps before the window ${up.overlaps - overlaps.length}; by replica ${JSON.stringify(spread.rows)}; during Redis outage ${during}`,
    );

    // Account tests: one stored result per occurrence, next_run_at moved on every time.
    const dup = await client.query(`SELECT plan_id, occurrence, count(*) FROM account_test_results GROUP BY 1, 2 HAVING count(*) > 1`);
    expect(dup.rows).toEqual([]);
    const perPlan = await client.query(
      `SELECT plan_id, count(*)::int AS n, extract(epoch FROM max(occurrence) - min(occurrence))::int AS span FROM account_test_results GROUP BY plan_id ORDER BY plan_id`,
    );
    expect(perPlan.rows).toHaveLength(PLANS);
    for (const p of perPlan.rows) {
      // At most one result per 2 s slot (slots missed while no replica could run them are skipped, not run in a burst),
      // plus the immediate test at creation, at least half an interval before the first slot (issue 24).
      expect(p.n, `plan ${p.plan_id}`).toBeGreaterThanOrEqual(3);
      expect(p.n, `plan ${p.plan_id}`).toBeLessThanOrEqual(p.span / 2 + 2);
    }
    const planHits = codex.requests.filter((r) => r.path === '/backend-api/codex/responses');
    // The plans spoke what the Codex endpoint accepts (store:false, stream, the account id): every plan
    // has passed, and no stored result failed on an answer the endpoint gave (a refusal, a wrong body).
    // A result with no answer is the loaded machine's, not the request's: a test's 1 s timeout can run
    // out, as the monitors' probes above can (the upstream counts requests read after their client hung
    // up), and a test that could not start (its token not read in time) is stored `not_sent` with no
    // status, leaving the account as it was. (A CI run on 6-Dec-2026 stored one such failure among
    // the plans' results with every check above green.) Nothing else: a refused connection, an
    // unreadable body or a wrong answer from the loopback endpoint is a defect, loaded or not.
    const failedTests = await client.query(`SELECT plan_id, occurrence, status, error_class, latency_ms, instance_id FROM account_test_results WHERE NOT ok`);
    const loadOnly = (r: { status: number | null; error_class: string | null }) => r.error_class === 'timeout' || (r.status === null && r.error_class === 'not_sent');
    expect(
      failedTests.rows.filter((r) => !loadOnly(r)),
      `failed account tests: ${JSON.stringify(failedTests.rows)}`,
    ).toEqual([]);
    const passedPlans = await client.query(`SELECT count(DISTINCT plan_id)::int AS n FROM account_test_results WHERE ok`);
    expect(passedPlans.rows[0].n, `failed account tests: ${JSON.stringify(failedTests.rows)}`).toBe(PLANS);
    console.log(`account tests: ${JSON.stringify(perPlan.rows)}; ${failedTests.rows.length} failed without an answer; the Codex endpoint saw ${planHits.length} test requests`);
  }, 180_000);
});

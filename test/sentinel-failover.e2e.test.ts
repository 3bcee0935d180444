import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type Cluster, type Replica } from './helpers/cluster.js';
import { SentinelSet } from './helpers/redis-topologies.js';
import { pace, waitFor } from './helpers/wait.js';

/**
 * Issue 49, point 5: after a Sentinel failover under load every loop resumes without a restart
 * (BullMQ #648: workers that stayed on the demoted primary and never took a job again). Debian's
 * `redis-sentinel` (three of them) watches a primary and a replica; two replicas of relay-jobs on
 * `redis+sentinel://` take usage events, quota increments and canary rounds every second while the
 * sentinels fail over and the old primary is then killed. Afterwards, on the same processes:
 * rounds are claimed under the Redis lock again, no accepted usage event is missing, the quota
 * counters count and flush, and the scheduler snapshot (Redis buckets) takes a new account.
 */
describe('Sentinel failover under load (redis-sentinel)', () => {
  let sentinel: SentinelSet;
  let cluster: Cluster;

  beforeAll(async () => {
    sentinel = await SentinelSet.start({ sentinelBinary: 'redis-sentinel' });
    cluster = await startCluster({
      replicas: ['sf0', 'sf1'],
      // The sentinels' Redis is the test's: nothing for the harness to stop or start.
      redis: { url: sentinel.url, stop: async () => undefined, start: async () => undefined },
      env: {
        RELAY_JOBS__JOBS__CANARY__ENABLED: 'true',
        RELAY_JOBS__JOBS__CANARY__EVERY: '1s',
        RELAY_JOBS__JOBS__CANARY__SLEEP: '100ms',
        RELAY_JOBS__JOBS__CANARY__TIMEOUT: '2s',
        RELAY_JOBS__JOBS__CANARY__LOCK_TTL: '3s',
        RELAY_JOBS__QUOTA__FLUSH_DELAY: '500ms',
      },
    });
  });
  afterAll(async () => {
    await cluster?.stop();
    await sentinel?.stop();
  });

  const post = async (r: Replica, path: string, body: unknown) => (await cluster.api(r, path, { body, timeoutMs: 10_000 }).catch(() => null))?.status ?? 0;
  const dbNow = async () => Number((await (await cluster.sql()).query(`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS t`)).rows[0].t);

  /** One gateway-like load: a batch of usage events and a quota increment every ~50 ms, alternating replicas; what was acknowledged is kept. */
  function load() {
    const accepted: string[] = [];
    const acked = new Map<string, number>();
    let phase = 'before';
    let running = true;
    let n = 0;
    const loop = (async () => {
      while (running) {
        const r = cluster.replicas[n % 2]!;
        const ids = Array.from({ length: 3 }, (_, i) => `sf-${n}-${i}`);
        const events = ids.map((request_id) => ({
          request_id,
          user_id: 'sf-user',
          platform: 'openai',
          model: 'gpt',
          input_tokens: 10,
          output_tokens: 1,
          cost: '0.001',
          created_at: new Date().toISOString(),
        }));
        const user = `sf-${phase}-${n % 5}`;
        const [u, q] = await Promise.all([post(r, '/usage', { events }), post(r, '/quota/usage', { increments: [{ user_id: user, platform: 'openai', amount: 2 }] })]);
        if (u === 200) accepted.push(...ids);
        if (q === 200) acked.set(user, (acked.get(user) ?? 0) + 2);
        n++;
        await pace(50);
      }
    })();
    return {
      accepted,
      acked,
      setPhase: (p: string) => (phase = p),
      stop: async () => {
        running = false;
        await loop;
      },
    };
  }

  it('rounds, usage, quota counters and the snapshot keep working on the same processes', async () => {
    const sql = await cluster.sql();
    const boots = (await sql.query(`SELECT instance_id, started_at::text AS s FROM instances ORDER BY instance_id`)).rows;
    const pids = cluster.replicas.map((r) => r.proc.proc.pid);
    const redisRounds = async (after: number) =>
      Number(
        (await sql.query(`SELECT count(*) AS n FROM job_runs WHERE job_name = 'canary' AND status = 'ok' AND lock_backend = 'redis' AND started_at > to_timestamp($1 / 1000.0)`, [after])).rows[0].n,
      );
    const account = async (name: string) => {
      const res = await cluster.api(0, '/accounts', {
        body: { platform: 'anthropic', name, credentials: { access_token: `${name}-secret`, expires_at: new Date(Date.now() + 30 * 86_400_000).toISOString() } },
      });
      expect(res.status, await res.clone().text()).toBe(201);
      return ((await res.json()) as { id: number }).id;
    };
    /** Until every replica answers the account from its snapshot (the Redis buckets), not from PostgreSQL. */
    const inSnapshot = (id: number, what: string) =>
      waitFor(
        async () => {
          for (const r of cluster.replicas) {
            const a = (await (await cluster.api(r, '/scheduler/accounts?platform=anthropic')).json()) as { source: string; accounts: { id: number }[] };
            if (a.source !== 'snapshot' || !a.accounts.some((x) => x.id === id)) return false;
          }
          return true;
        },
        { what, timeoutMs: 60_000, ignoreErrors: true },
      );

    const traffic = load();
    try {
      await waitFor(async () => (await redisRounds(0)) >= 3, { what: 'canary rounds under the first primary', timeoutMs: 60_000 });
      await inSnapshot(await account('sf-before'), 'the first account in every snapshot');
      await waitFor(() => traffic.accepted.length >= 30 && traffic.acked.size >= 3, { what: 'load through the first primary' });

      const oldPrimary = (await sentinel.primaryPort()) === sentinel.primary.port ? sentinel.primary : sentinel.replica;
      await sentinel.failover();
      await oldPrimary.kill();
      // From here every write reaches the new primary (a write the demoted one took between the
      // promotion and its kill is Sentinel's documented async-replication loss, not counted).
      traffic.setPhase('after');
      const switched = await dbNow();

      await waitFor(async () => (await redisRounds(switched)) >= 3, { what: 'canary rounds under the Redis lock on the new primary', timeoutMs: 60_000 });
      await inSnapshot(await account('sf-after'), 'an account made after the failover in every snapshot');
      await waitFor(() => [...traffic.acked.keys()].filter((u) => u.startsWith('sf-after')).length >= 5, { what: 'quota increments on the new primary', timeoutMs: 60_000 });
    } finally {
      await traffic.stop();
    }

    // Usage: every event a replica answered 200 for is stored, none twice.
    const stored = async () => Number((await sql.query(`SELECT count(DISTINCT request_id) AS n FROM usage_logs WHERE request_id = ANY($1::text[])`, [traffic.accepted])).rows[0].n);
    await waitFor(async () => (await stored()) === traffic.accepted.length, {
      what: async () => `${traffic.accepted.length} accepted usage events stored (${await stored()} so far)`,
      timeoutMs: 60_000,
    });
    // Quota: the counters of the users written after the failover flush to exactly what was acknowledged.
    const after = [...traffic.acked].filter(([u]) => u.startsWith('sf-after'));
    const flushed = async () => {
      const { rows } = await sql.query<{ user_id: string; used: string }>(`SELECT user_id, used FROM platform_quota_usage WHERE platform = 'openai' AND user_id LIKE 'sf-after-%'`);
      return Object.fromEntries(rows.map((r) => [r.user_id, Number(r.used)] as const).sort(([a], [b]) => a.localeCompare(b)));
    };
    await waitFor(async () => JSON.stringify(await flushed()) === JSON.stringify(Object.fromEntries(after.sort(([a], [b]) => a.localeCompare(b)))), {
      what: async () => `quota flushed after the failover: ${JSON.stringify(await flushed())} vs acknowledged ${JSON.stringify(Object.fromEntries(after))}`,
      timeoutMs: 60_000,
    });

    // No restart: the same processes, the same boots, both ready.
    expect(cluster.replicas.map((r) => r.proc.proc.pid)).toEqual(pids);
    expect(cluster.replicas.every((r) => r.alive)).toBe(true);
    expect((await sql.query(`SELECT instance_id, started_at::text AS s FROM instances ORDER BY instance_id`)).rows).toEqual(boots);
    for (const r of cluster.replicas) expect(r.lines.filter((l) => l.includes('relay-jobs started'))).toHaveLength(1);
    for (const r of cluster.replicas) expect((await fetch(r.url('/readyz'))).status).toBe(200);
  });
});

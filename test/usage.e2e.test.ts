import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { pace, waitFor } from './helpers/wait.js';

/**
 * Invariant 4 with a real process: a replica takes a steady stream of usage batches and quota
 * increments from eight clients and gets SIGTERM in the middle. Every usage event it answered
 * 2xx for is in usage_logs exactly once, and every acknowledged quota increment is in
 * PostgreSQL after it exits.
 */
describe('usage and quota survive SIGTERM mid-stream', () => {
  let cluster: Cluster;
  let sql: pg.Client;

  beforeAll(async () => {
    cluster = await startCluster({
      replicas: ['u0'],
      migrate: false,
      waitStarted: false,
      env: {
        // The defaults for these, not the harness's.
        RELAY_JOBS__DATABASE__POOL_SIZE: undefined,
        RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: undefined,
        RELAY_JOBS__REDIS__COMMAND_TIMEOUT: undefined,
        RELAY_JOBS__USAGE__BATCH_SIZE: '50',
        RELAY_JOBS__JOBS__PLATFORM_QUOTA_FLUSHER__EVERY: '500ms',
        RELAY_JOBS__SHUTDOWN__GRACE: '10s',
      },
    });
    sql = await cluster.sql();
  });
  afterAll(() => cluster?.stop());

  it('every 2xx-acknowledged event stored once, every acknowledged increment flushed', async () => {
    const svc = cluster.replica('u0').proc;
    await svc.waitForLine(/relay-jobs started/);
    const url = (p: string) => cluster.replica('u0').url(`/api/v1${p}`);
    const headers = { authorization: `Bearer ${cluster.adminToken}`, 'content-type': 'application/json' };
    const acked = new Set<string>();
    const attempted = new Set<string>();
    const quotaAcked = new Map<string, number>();
    const quotaAttempted = new Map<string, number>();
    let stop = false;
    let n = 0;
    const client = async (c: number) => {
      while (!stop) {
        const events = Array.from({ length: 20 }, () => ({ request_id: `c${c}-${n++}`, user_id: `user-${c}`, platform: 'openai', model: 'gpt-5', input_tokens: 3, output_tokens: 4, cost: '0.0001' }));
        for (const e of events) attempted.add(e.request_id);
        const user = `quser-${c}`;
        quotaAttempted.set(user, (quotaAttempted.get(user) ?? 0) + 1);
        try {
          const [u, q] = await Promise.all([
            fetch(url('/usage'), { method: 'POST', headers, body: JSON.stringify({ events }) }),
            fetch(url('/quota/usage'), { method: 'POST', headers, body: JSON.stringify({ increments: [{ user_id: user, platform: 'openai', amount: 1 }] }) }),
          ]);
          if (u.ok) for (const e of events) acked.add(e.request_id);
          if (q.ok) quotaAcked.set(user, (quotaAcked.get(user) ?? 0) + 1);
        } catch {
          await pace(20); // refused while shutting down: not acknowledged; the client tries again a moment later
        }
      }
    };
    const clients = Array.from({ length: 8 }, (_, c) => client(c));
    // SIGTERM mid-stream, once the stream is well under way: over 1,000 events acknowledged (about
    // 3 s on a quiet machine; a loaded one acknowledged 340 in that time).
    await waitFor(() => acked.size > 1000, { what: () => `over 1000 acknowledged usage events (${acked.size} so far)`, timeoutMs: 120_000 });
    svc.proc.kill('SIGTERM');
    const code = await svc.exitedWithin();
    stop = true;
    await Promise.all(clients);
    expect(code).toBe(0);

    const ids = [...acked];
    const { rows } = await sql.query(`SELECT request_id, count(*)::int AS n FROM usage_logs WHERE request_id = ANY($1) GROUP BY request_id`, [ids]);
    expect(rows.length, 'acknowledged events missing from usage_logs').toBe(ids.length);
    expect(rows.filter((r) => r.n !== 1)).toEqual([]);
    // Nothing was stored that nobody sent.
    const total = Number((await sql.query(`SELECT count(*) AS n FROM usage_logs`)).rows[0].n);
    expect(total).toBeGreaterThanOrEqual(ids.length);
    expect(total).toBeLessThanOrEqual(attempted.size);

    const quota = new Map((await sql.query(`SELECT user_id, used FROM platform_quota_usage`)).rows.map((r) => [r.user_id, Number(r.used)]));
    for (const [user, ackedCount] of quotaAcked) {
      expect(quota.get(user), user).toBeGreaterThanOrEqual(ackedCount);
      expect(quota.get(user), user).toBeLessThanOrEqual(quotaAttempted.get(user)!);
    }
    expect(svc.lines.some((l) => /usage writer drained|shutdown complete/.test(l))).toBe(true);
  }, 150_000);
});

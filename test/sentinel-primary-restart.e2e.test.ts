import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { connectRedis, type RedisClient } from '../src/coordination/redis-client.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { SentinelSet } from './helpers/redis-topologies.js';
import { waitFor } from './helpers/wait.js';

/**
 * Issue 53, soak finding 1: the Redis primary dies, the sentinels fail over while it is down, the
 * old primary comes back (as a replica of the new one), and clients answered every command with
 * "Connection is closed." until shutdown. Cause (ioredis 6.0.0): the failover detector of the lost
 * connection stays subscribed to `+switch-master`; when the switch is announced while the client
 * is between two reconnect attempts *inside* the connector (awaiting a sentinel's reply to
 * `get-master-addr-by-name`), the detector calls `connector.disconnect()`, the connector's
 * attempt then throws "Connection is closed." and `Redis#connect` ends in status `end`, which no
 * retry strategy ever leaves. On a loaded host that window (a sentinel round trip) is wide; here
 * the first sentinel is stopped (SIGSTOP) so every client is inside it when the switch is heard:
 * the same sequence, every run. `resume` continues that sentinel once the switch is heard (the
 * soak's case); `frozen` leaves it stopped (a sentinel that accepts but never answers).
 */
const PAUSED = new Set<SentinelSet>();

async function call(port: number, ...args: string[]): Promise<unknown> {
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 2000, commandTimeout: 2000 });
  c.on('error', () => undefined);
  try {
    await c.connect();
    return await c.call(args[0]!, ...args.slice(1));
  } finally {
    c.disconnect();
  }
}

/** The ids of the connections subscribed on a sentinel (each client's failover detector holds one on every sentinel). */
async function subscribers(port: number): Promise<string[]> {
  const list = String(await call(port, 'CLIENT', 'LIST'));
  return list
    .split('\n')
    .filter((l) => / sub=[1-9]/.test(l))
    .map((l) => /^id=(\d+)/.exec(l)![1]!);
}

const primaryPort = async (sentinelPort: number) => Number(((await call(sentinelPort, 'SENTINEL', 'get-master-addr-by-name', 'mymaster')) as string[])[1]);

/**
 * Stops the first sentinel, kills the primary, waits until the other two sentinels name the
 * replica and every client's detector has heard the switch (its subscriptions from before are
 * gone), then continues the stopped sentinel (`resume`) or not (`frozen`), and restarts the old
 * primary on its port. `clients`: how many detectors to wait for before the kill.
 */
async function failoverWhileDown(set: SentinelSet, clients: number, mode: 'resume' | 'frozen'): Promise<void> {
  const stalled = set.sentinels[0]!;
  const watching = set.sentinels.slice(1).map((s) => s.port);
  const before = await waitFor(
    async () => {
      const ids = await Promise.all(watching.map(subscribers));
      return ids.every((l) => l.length >= clients) && ids;
    },
    { what: `the failover detectors of ${clients} clients subscribed on the sentinels` },
  );
  const oldPort = await primaryPort(watching[0]!);
  const old = [set.primary, set.replica].find((n) => n.port === oldPort)!;
  stalled.proc!.kill('SIGSTOP');
  PAUSED.add(set);
  await old.kill();
  await waitFor(
    async () => {
      const [p1, p2] = await Promise.all(watching.map(primaryPort));
      const now = await Promise.all(watching.map(subscribers));
      return p1 !== oldPort && p2 !== oldPort && now.every((ids, i) => !ids.some((id) => before[i]!.includes(id)));
    },
    { what: 'the sentinels to promote the replica and every client to hear +switch-master', timeoutMs: 60_000, ignoreErrors: true },
  );
  if (mode === 'resume') {
    stalled.proc!.kill('SIGCONT');
    PAUSED.delete(set);
  }
  await old.start();
}

/** Until every client writes and reads on the current primary (30 s: far past the sentinels' and the clients' retry delays). */
async function allAnswer(clients: RedisClient[], what: string): Promise<void> {
  await waitFor(
    async () => {
      const ok = await Promise.all(
        clients.map((c, i) =>
          c.set(`restart:${i}`, String(i)).then(
            async () => (await c.get(`restart:${i}`)) === String(i),
            () => false,
          ),
        ),
      );
      return ok.every(Boolean);
    },
    { what: async () => `${what} (statuses: ${clients.map((c) => c.status).join(', ')})`, timeoutMs: 30_000, intervalMs: 200 },
  );
}

describe('Sentinel failover while the primary is down, then the old primary restarts (issue 53)', () => {
  let set: SentinelSet | null = null;
  let clients: RedisClient[] = [];
  let cluster: Cluster | null = null;
  afterEach(async () => {
    for (const c of clients) c.disconnect();
    clients = [];
    await cluster?.stop();
    cluster = null;
    if (set && PAUSED.delete(set)) set.sentinels[0]!.proc?.kill('SIGCONT');
    await set?.stop();
    set = null;
  });

  it.each(['resume', 'frozen'] as const)('every product client answers again within 30 s (first sentinel %s)', async (mode) => {
    set = await SentinelSet.start();
    clients = await Promise.all(Array.from({ length: 3 }, () => connectRedis(set!.url, 300, 2000)));
    await allAnswer(clients, 'the clients on the first primary');
    await failoverWhileDown(set, clients.length, mode);
    await allAnswer(clients, 'every client on the new primary after the old one restarted');
  });

  it('replicas run their Redis jobs again, and SIGTERM ends them while no Redis server answers', async () => {
    set = await SentinelSet.start({ sentinelBinary: 'redis-sentinel' });
    const s = set;
    cluster = await startCluster({
      replicas: ['pr0', 'pr1'],
      redis: { url: s.url, stop: async () => undefined, start: async () => undefined },
      env: { RELAY_JOBS__JOBS__SCHEDULER_SNAPSHOT__EVERY: '1s', RELAY_JOBS__JOBS__SCHEDULER_SNAPSHOT__TIMEOUT: '1s' },
    });
    const c = cluster;
    const sql = await c.sql();
    const dbNow = async () => Number((await sql.query(`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS t`)).rows[0].t);
    /** Every replica has finished a `scheduler_snapshot` round (each reads the Redis buckets) begun after `t`, and answers /readyz (a Redis PING). */
    const healthy = (t: number, what: string) =>
      waitFor(
        async () => {
          const { rows } = await sql.query<{ instance_id: string }>(
            `SELECT DISTINCT instance_id FROM job_runs WHERE job_name = 'scheduler_snapshot' AND status IN ('ok', 'no_work') AND started_at > to_timestamp($1 / 1000.0)`,
            [t],
          );
          if (rows.length < c.replicas.length) return false;
          for (const r of c.replicas) if ((await fetch(r.url('/readyz'))).status !== 200) return false;
          return true;
        },
        {
          what: async () => {
            const { rows } = await sql.query(
              `SELECT instance_id, status, left(error, 120) AS error FROM job_runs WHERE job_name = 'scheduler_snapshot' AND started_at > to_timestamp($1 / 1000.0) ORDER BY id DESC LIMIT 6`,
              [t],
            );
            return `${what}; last rounds: ${JSON.stringify(rows)}`;
          },
          timeoutMs: 30_000,
          ignoreErrors: true,
        },
      );
    await healthy(0, 'scheduler_snapshot rounds on the first primary');

    await failoverWhileDown(s, c.replicas.length, 'resume');
    await healthy(await dbNow(), 'scheduler_snapshot rounds on every replica after the old primary restarted');

    // SIGTERM ends a replica whatever Redis does (the soak saw one ignore it for minutes): first with
    // both data nodes stopped (connections accepted, nothing answered), then with both gone.
    const stops = async (i: number, what: string) => {
      const r = c.replicas[i]!;
      await waitFor(async () => (await fetch(r.url('/readyz'))).status === 503, { what: `${r.id} not ready (${what})`, ignoreErrors: true });
      const exited = r.kill('SIGTERM');
      // The ladder's grace (20 s) plus a loaded machine's margin: a replica that waits on Redis for good fails here.
      await waitFor(() => !r.alive, { what: `${r.id} to exit after SIGTERM (${what})`, timeoutMs: 60_000 });
      expect(await exited).toBe(0);
    };
    for (const n of [s.primary, s.replica]) n.proc!.kill('SIGSTOP');
    await stops(0, 'Redis stopped');
    await Promise.all([s.primary.kill(), s.replica.kill()]);
    await stops(1, 'Redis gone, the sentinels answering');
  });
});

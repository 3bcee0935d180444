import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { Cluster } from 'ioredis';
import { loadConfig } from '../src/app/config-schema.js';
import { parseRedisUrl } from '../src/config/redis-url.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { connectRedis, type RedisClient } from '../src/coordination/redis-client.js';
import { RedisQuotaCounters, quotaMember } from '../src/coordination/quota-counters.js';
import { RedisLeaderLock } from '../src/coordination/leader-lock.js';
import { quotaCounterKey, CLUSTER_QUOTA_SHARDS } from '../src/coordination/keys.js';
import { captureLogs } from './helpers/log-capture.js';
import { ServiceProcess } from './helpers/cli.js';
import { runClusterScenario } from './helpers/cluster-scenario.js';
import { startCluster, type Cluster as TestCluster } from './helpers/cluster.js';
import { RedisClusterSet, SentinelSet } from './helpers/redis-topologies.js';
import { TEST_MASTER_KEY, freePort, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';

const ADMIN = 'topology-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };

describe('REDIS_URL forms', () => {
  it('parses one node, a Sentinel set and Redis Cluster seed nodes', () => {
    expect(parseRedisUrl('redis://127.0.0.1:6379/2')).toMatchObject({ kind: 'single', tls: false });
    expect(parseRedisUrl('redis+sentinel://:s3cret@10.0.0.1:26379,sentinel-b,[::1]:26380/mymaster/3?sentinel_password=x')).toEqual({
      kind: 'sentinel',
      sentinels: [
        { host: '10.0.0.1', port: 26379 },
        { host: 'sentinel-b', port: 26379 },
        { host: '::1', port: 26380 },
      ],
      master: 'mymaster',
      db: 3,
      username: undefined,
      password: 's3cret',
      sentinelPassword: 'x',
      tls: false,
    });
    expect(parseRedisUrl('rediss+cluster://app:pw@n1:7000,n2:7001')).toEqual({
      kind: 'cluster',
      nodes: [
        { host: 'n1', port: 7000 },
        { host: 'n2', port: 7001 },
      ],
      username: 'app',
      password: 'pw',
      tls: true,
    });
  });

  it('refuses malformed forms at config load, naming the key and never echoing the password', () => {
    const base = { DATABASE_URL: 'postgres://x@127.0.0.1/db', RELAY_JOBS_INSTANCE_ID: 'a', RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY };
    const load = (url: string) => () => loadConfig({ env: { ...base, REDIS_URL: url } });
    expect(load('redis+sentinel://:hunter2@h1:26379')).toThrow(/redis\.url[\s\S]*primary group name/);
    expect(load('redis+cluster://:hunter2@h1:7000/5')).toThrow(/redis\.url[\s\S]*takes no path/);
    expect(load('redis+cluster://h1:99999')).toThrow(/host 1 of the list has port 99999/);
    expect(load('memcached://h1')).toThrow(/redis\.url[\s\S]*expected redis:\/\//);
    try {
      load('redis+sentinel://:hunter2@h1:26379')();
    } catch (err) {
      expect((err as Error).message).not.toContain('hunter2');
    }
  });
});

// The three topologies below share nothing (each has its own Redis servers, database, key prefix
// and ports), so they run side by side; the tests inside one share its set and run in order.
describe.concurrent('Redis Cluster of three primaries', () => {
  let set: RedisClusterSet;
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let rt: Runtime;
  let http: FastifyInstance;
  let redis: RedisClient;
  const prefix = uniqueName('rjrc');
  const logs = captureLogs('redis-cluster');

  beforeAll(async () => {
    // Side by side (a new Redis Cluster primary waits 2 s before it serves); each assigned as it comes, for afterAll.
    const started = await Promise.allSettled([RedisClusterSet.start(3, { appendonly: true }).then((s) => (set = s)), freshDatabase().then((d) => (db = d))]);
    for (const r of started) if (r.status === 'rejected') throw r.reason;
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL: set.url,
        RELAY_JOBS_INSTANCE_ID: 'rc-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
      },
    });
    rt = await Runtime.create(config, { logger: logs.logger });
    http = buildHttpServer(rt);
    redis = await connectRedis(set.url, 1000, 2000);
  });
  afterAll(async () => {
    redis?.disconnect();
    await rt?.shutdown();
    await http?.close();
    await db?.drop();
    await set?.stop();
  });

  const inc = (user: string, amount: number) => http.inject({ method: 'POST', url: '/api/v1/quota/usage', headers: auth, payload: { increments: [{ user_id: user, platform: 'openai', amount }] } });
  const stored = async (user: string) =>
    ((await http.inject({ url: `/api/v1/quota/${user}`, headers: auth })).json().platforms as Array<{ platform: string; used: number }>).find((p) => p.platform === 'openai')?.used;

  it.sequential('connects as a cluster client; quota counters spread over the primaries and flush with no CROSSSLOT', async ({ expect }) => {
    expect(rt.redis).toBeInstanceOf(Cluster);
    const users = Array.from({ length: 60 }, (_, i) => `u${i}`);
    for (const u of users) expect((await inc(u, 3)).statusCode).toBe(200);
    for (const u of users.slice(0, 20)) expect((await inc(u, 4)).json().results[0].used).toBe(7);
    const owners = new Set(await Promise.all(users.map(async (u) => (await set.nodeOf(quotaCounterKey({ prefix, env: 'test' }, quotaMember(u, 'openai'), CLUSTER_QUOTA_SHARDS))).port)));
    expect(owners.size).toBe(3);
    await rt.runNow('platform_quota_flusher');
    for (const u of users) expect(await stored(u)).toBe(users.indexOf(u) < 20 ? 7 : 3);
    const counters = new RedisQuotaCounters(redis, { prefix, env: 'test' });
    expect(await counters.dirtyCount()).toBe(0);
    // A versioned reset on a cluster: the two-key script's keys share the shard's slot.
    expect((await http.inject({ method: 'POST', url: '/api/v1/quota/u5/openai/reset', headers: auth, payload: {} })).json()).toMatchObject({ used: 0, epoch: 1 });
    await rt.runNow('platform_quota_flusher');
    expect(await stored('u5')).toBe(0);
  });

  it.sequential('leader locks and cluster rounds run on a cluster (lock keys tagged per job)', async ({ expect }) => {
    const a = new RedisLeaderLock(redis, { prefix, env: 'locks' }, 'a');
    const b = new RedisLeaderLock(redis, { prefix, env: 'locks' }, 'b');
    const held = await a.acquire('canary', 10_000);
    expect(held.acquired).toBe(true);
    expect(await b.acquire('canary', 10_000)).toMatchObject({ acquired: false, backend: 'redis', holder: 'a' });
    if (held.acquired) await held.handle.release();
    expect((await b.acquire('canary', 10_000)).acquired).toBe(true);
    const run = await rt.runNow('canary');
    expect(run).toBeDefined();
    const { rows } = await rt.db.query<{ lock_backend: string }>(`SELECT lock_backend FROM job_runs WHERE job_name = 'canary'`);
    expect(rows.map((r) => r.lock_backend)).toEqual(['redis']);
  });

  it.sequential('a primary restarted mid-run loses no acknowledged increment (AOF, appendfsync always)', async ({ expect }) => {
    const member = quotaMember('restart-me', 'openai');
    const node = await set.nodeOf(quotaCounterKey({ prefix, env: 'test' }, member, CLUSTER_QUOTA_SHARDS));
    let acknowledged = 0;
    for (let i = 0; i < 10; i++) if ((await inc('restart-me', 1)).statusCode === 200) acknowledged += 1;
    await rt.runNow('platform_quota_flusher');
    for (let i = 0; i < 5; i++) if ((await inc('restart-me', 1)).statusCode === 200) acknowledged += 1; // not flushed yet
    await node.kill();
    // While its primary is down, an increment is refused (503), never acknowledged and lost.
    const during = await inc('restart-me', 100);
    expect(during.statusCode).toBe(503);
    await node.start();
    await set.waitHealthy();
    const after = await waitFor(
      async () => {
        const r = await inc('restart-me', 1);
        return r.statusCode === 200 ? r : null;
      },
      { what: 'the counter to answer again', ignoreErrors: true },
    );
    acknowledged += 1;
    expect(after.json().results[0].used).toBe(acknowledged);
    await waitFor(
      async () => {
        await rt.runNow('platform_quota_flusher');
        return (await stored('restart-me')) === acknowledged;
      },
      { what: 'the flush after the restart', ignoreErrors: true },
    );
  });
});

describe.concurrent('Redis Sentinel: a failover under three replicas running canary every second', () => {
  let sentinel: SentinelSet;
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let client: pg.Client;
  const replicas: ServiceProcess[] = [];

  beforeAll(async () => {
    [sentinel, db] = await Promise.all([SentinelSet.start(), freshDatabase()]);
    client = new pg.Client({ connectionString: db.url });
    await client.connect();
  });
  afterAll(async () => {
    for (const r of replicas) if (r.proc.exitCode === null) r.proc.kill('SIGKILL');
    await client?.end();
    await db?.drop();
    await sentinel?.stop();
  });

  it('no slot twice, no overlap, rounds continue within the bound, every replica ready after', async ({ expect }) => {
    const prefix = uniqueName('rjsent');
    const ports: number[] = [];
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      ports.push(port);
      replicas.push(
        ServiceProcess.start(`s${i}`, {
          DATABASE_URL: db.url,
          REDIS_URL: sentinel.url,
          RELAY_JOBS_INSTANCE_ID: `s${i}`,
          RELAY_JOBS_ENV: 'e2e',
          RELAY_JOBS_HTTP_PORT: String(port),
          RELAY_JOBS_ADMIN_TOKEN: ADMIN,
          RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
          RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
          RELAY_JOBS__REDIS__COMMAND_TIMEOUT: '300ms',
          RELAY_JOBS__DATABASE__POOL_SIZE: '8',
          RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: '1s',
          RELAY_JOBS__SHUTDOWN__GRACE: '5s',
          RELAY_JOBS__JOBS__CANARY__ENABLED: 'true',
          RELAY_JOBS__JOBS__CANARY__EVERY: '1s',
          RELAY_JOBS__JOBS__CANARY__SLEEP: '200ms',
          RELAY_JOBS__JOBS__CANARY__TIMEOUT: '2s',
          RELAY_JOBS__JOBS__CANARY__LOCK_TTL: '3s',
          RELAY_JOBS__JOBS__SESSION_CLEANUP__ENABLED: 'false',
        }),
      );
    }
    await Promise.all(replicas.map((r) => r.waitForLine(/relay-jobs started/)));
    const dbNow = async () => Number((await client.query(`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS t`)).rows[0].t);
    const roundsAfter = async (t: number) =>
      Number((await client.query(`SELECT count(*) AS n FROM job_runs WHERE job_name = 'canary' AND status = 'ok' AND started_at > to_timestamp($1 / 1000.0)`, [t])).rows[0].n);
    await waitFor(async () => (await roundsAfter(0)) >= 3, { what: 'canary rounds through the first primary', ignoreErrors: true });

    const oldPrimary = (await sentinel.primaryPort()) === sentinel.primary.port ? sentinel.primary : sentinel.replica;
    await sentinel.failover();
    const switched = await dbNow();
    await oldPrimary.kill();
    // Rounds flow again through the new primary (or the PostgreSQL fallback meanwhile).
    await waitFor(async () => (await roundsAfter(switched)) >= 3, { what: 'three canary rounds after the failover', timeoutMs: 30_000, ignoreErrors: true });
    const firstAfter = Number(
      (await client.query(`SELECT extract(epoch FROM min(started_at)) * 1000 AS t FROM job_runs WHERE job_name = 'canary' AND status = 'ok' AND started_at > to_timestamp($1 / 1000.0)`, [switched]))
        .rows[0].t,
    );
    // The bound: the canary's cadence plus the lock TTL a lost Redis lock may still be trusted for.
    expect(firstAfter - switched).toBeLessThan(1000 + 3000 + 2000);
    await waitFor(
      async () =>
        Number(
          (await client.query(`SELECT count(*) AS n FROM job_runs WHERE job_name = 'canary' AND lock_backend = 'redis' AND started_at > to_timestamp($1 / 1000.0) + interval '3 seconds'`, [switched]))
            .rows[0].n,
        ) >= 2,
      { what: 'rounds on the new primary again (lock_backend redis)', ignoreErrors: true },
    );

    const dupes = await client.query(`SELECT slot, count(*) AS n FROM job_runs WHERE job_name = 'canary' AND slot IS NOT NULL GROUP BY slot HAVING count(*) > 1`);
    expect(dupes.rows).toEqual([]);
    const rounds = (
      await client.query<{ s: number; e: number }>(
        `SELECT extract(epoch FROM started_at) * 1000 AS s, extract(epoch FROM finished_at) * 1000 AS e FROM job_runs WHERE job_name = 'canary' AND status = 'ok' ORDER BY started_at`,
      )
    ).rows.map((r) => ({ s: Number(r.s), e: Number(r.e) }));
    for (let i = 1; i < rounds.length; i++) expect(rounds[i]!.s, `round ${i} overlaps the one before`).toBeGreaterThanOrEqual(rounds[i - 1]!.e);
    for (const port of ports) await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200, { what: `replica on ${port} ready`, ignoreErrors: true });
    for (const r of replicas) r.proc.kill('SIGTERM');
    expect(await Promise.all(replicas.map((r) => r.exited))).toEqual([0, 0, 0]);
  });
});

describe.concurrent('the cluster scenario on a Redis Cluster', () => {
  let set: RedisClusterSet;
  let cluster: TestCluster | undefined;

  beforeAll(async () => {
    set = await RedisClusterSet.start(3);
    cluster = await startCluster({ replicas: 0, migrate: false, redis: { url: set.url, stop: () => set.stopNodes(), start: () => set.startNodes() } });
  });
  afterAll(async () => {
    await cluster?.stop();
    await set?.stop();
  });

  it('no slot twice, no overlap, failover, PG fallback while the whole Redis Cluster is down, clean SIGTERM', async () => {
    await runClusterScenario({ cluster: cluster! });
  }, 150_000);
});

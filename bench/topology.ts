/**
 * Production topology, measured with real servers on loopback (issue 25), each against the plain
 * single-node figure in the same run. Three `relay-jobs start` replicas, the canary every second
 * (lock_ttl 3 s, 300 ms rounds), every other job off:
 *
 * - crash failover: SIGKILL of the replica in the middle of a round → the next round started by
 *   another replica (from `job_runs`), with PostgreSQL direct (baseline) and behind PgBouncer in
 *   transaction mode with `DATABASE_DIRECT_URL`;
 * - Redis: a single node killed and restarted at once (baseline: rounds flow on the PostgreSQL
 *   fallback) against a Sentinel `SENTINEL FAILOVER` plus SIGKILL of the old primary → the first
 *   round after the switch, and the first one on the new primary (`lock_backend = redis`).
 *
 * `BENCH_ONLY=topology npm run bench`; `BENCH_TOPOLOGY_KILLS` (default 3) kills per setup.
 */
import pg from 'pg';
import { ServiceProcess } from '../test/helpers/cli.js';
import { PgBouncer } from '../test/helpers/pgbouncer.js';
import { SentinelSet } from '../test/helpers/redis-topologies.js';
import { PrivateRedis, REDIS_URL, dropRedisPrefix, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { Redis } from 'ioredis';
import { CANARY_EVERY_SECOND, OTHER_JOBS, jobsOff, replicaEnv, sleep } from './replicas.js';
import { benchSnapshotMemory, keyBytes } from './scheduler-snapshot.js';
import { RedisQuotaCounters, quotaMember } from '../src/coordination/quota-counters.js';

interface Setup {
  dbUrl: string;
  redisUrl: string;
  env?: Record<string, string>;
}

async function cluster(client: pg.Client, s: Setup): Promise<{ replicas: ServiceProcess[]; restart: (name: string) => ServiceProcess }> {
  const prefix = uniqueName('rjtopo');
  const envs = new Map<string, Record<string, string>>();
  for (let i = 0; i < 3; i++) {
    envs.set(
      `t${i}`,
      await replicaEnv(
        `t${i}`,
        { dbUrl: s.dbUrl, redisUrl: s.redisUrl, prefix },
        {
          RELAY_JOBS__REDIS__COMMAND_TIMEOUT: '300ms',
          RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: '1s',
          ...CANARY_EVERY_SECOND,
          ...jobsOff(OTHER_JOBS),
          ...s.env,
        },
      ),
    );
  }
  const restart = (name: string) => ServiceProcess.start(name, envs.get(name)!);
  const replicas = [...envs.keys()].map(restart);
  await Promise.all(replicas.map((r) => r.waitForLine(/relay-jobs started/)));
  await waitRounds(client, 0, 3);
  return { replicas, restart };
}

const dbNow = async (c: pg.Client) => Number((await c.query(`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS t`)).rows[0].t);

async function waitRounds(c: pg.Client, afterMs: number, n: number, extra = ''): Promise<number> {
  for (let i = 0; i < 600; i++) {
    const { rows } = await c.query(
      `SELECT extract(epoch FROM started_at) * 1000 AS t FROM job_runs WHERE job_name = 'canary' AND started_at > to_timestamp($1 / 1000.0) ${extra} ORDER BY started_at LIMIT $2`,
      [afterMs, n],
    );
    if (rows.length >= n) return Number(rows[0].t);
    await sleep(50);
  }
  throw new Error('canary rounds did not resume');
}

/** SIGKILL the replica mid-round `kills` times (restarting it each time); kill → next round elsewhere, in ms. */
async function crashFailovers(c: pg.Client, replicas: ServiceProcess[], kills: number, restart: (name: string) => ServiceProcess): Promise<number[]> {
  const out: number[] = [];
  for (let k = 0; k < kills; k++) {
    let victim: ServiceProcess | undefined;
    for (let i = 0; i < 400 && !victim; i++) {
      const { rows } = await c.query(
        `SELECT instance_id FROM job_runs WHERE job_name = 'canary' AND status = 'running' AND started_at BETWEEN clock_timestamp() - interval '200 milliseconds' AND clock_timestamp() - interval '50 milliseconds'`,
      );
      victim = rows[0] && replicas.find((r) => r.name === rows[0].instance_id && r.proc.exitCode === null && r.proc.signalCode === null);
      if (!victim) await sleep(20);
    }
    if (!victim) throw new Error('no replica mid-round');
    victim.proc.kill('SIGKILL');
    await victim.exited;
    const killed = await dbNow(c);
    const next = await waitRounds(c, killed, 1, `AND instance_id <> '${victim.name}'`);
    out.push(next - killed);
    const fresh = restart(victim.name);
    replicas[replicas.indexOf(victim)] = fresh;
    await fresh.waitForLine(/relay-jobs started/);
    await sleep(3000);
  }
  return out;
}

async function stopAll(replicas: ServiceProcess[]): Promise<void> {
  for (const r of replicas) if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill('SIGTERM');
  await Promise.all(replicas.map((r) => r.exited));
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const list = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(', ');

export async function benchTopology(kills = Number(process.env.BENCH_TOPOLOGY_KILLS ?? 3)): Promise<string> {
  const lines: string[] = [];
  const db = await freshDatabase();
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  const redis = await PrivateRedis.start();
  const bouncer = await PgBouncer.start('transaction');
  const sentinel = await SentinelSet.start();
  try {
    const failover: Array<[string, number[]]> = [];
    for (const [name, setup] of [
      ['PostgreSQL direct (baseline)', { dbUrl: db.url, redisUrl: redis.url }],
      ['PgBouncer transaction mode + DATABASE_DIRECT_URL', { dbUrl: bouncer.url(db.name), redisUrl: redis.url, env: { DATABASE_DIRECT_URL: db.url } }],
    ] as Array<[string, Setup]>) {
      const { replicas, restart } = await cluster(client, setup);
      failover.push([name, await crashFailovers(client, replicas, kills, restart)]);
      await stopAll(replicas);
    }
    lines.push('| setup | crash failover ms (each kill) | median ms |', '|---|---|---|');
    for (const [name, xs] of failover) lines.push(`| ${name} | ${list(xs)} | ${median(xs).toFixed(0)} |`);
    lines.push(`\nratio (median, PgBouncer + direct / direct): ${(median(failover[1]![1]) / median(failover[0]![1])).toFixed(2)}x`);

    // Redis: a single node killed and restarted at once, against a Sentinel failover.
    let { replicas } = await cluster(client, { dbUrl: db.url, redisUrl: redis.url });
    let t0 = await dbNow(client);
    await redis.stop();
    await redis.start();
    const plainAny = (await waitRounds(client, t0, 1)) - t0;
    const plainRedis = (await waitRounds(client, t0, 1, `AND lock_backend = 'redis'`)) - t0;
    await stopAll(replicas);
    ({ replicas } = await cluster(client, { dbUrl: db.url, redisUrl: sentinel.url }));
    const old = (await sentinel.primaryPort()) === sentinel.primary.port ? sentinel.primary : sentinel.replica;
    t0 = await dbNow(client);
    await sentinel.failover();
    await old.kill();
    const sentAny = (await waitRounds(client, t0, 1)) - t0;
    const sentRedis = (await waitRounds(client, t0, 1, `AND lock_backend = 'redis'`)) - t0;
    await stopAll(replicas);
    lines.push('', '| Redis event | first round after it ms | first round on Redis again ms |', '|---|---|---|');
    lines.push(`| single node killed and restarted (baseline) | ${plainAny.toFixed(0)} | ${plainRedis.toFixed(0)} |`);
    lines.push(`| Sentinel: SENTINEL FAILOVER + SIGKILL of the old primary | ${sentAny.toFixed(0)} | ${sentRedis.toFixed(0)} |`);
    lines.push(`\nratio (first round on Redis again, Sentinel / single node): ${(sentRedis / plainRedis).toFixed(2)}x`);
  } finally {
    await client.end();
    await sentinel.stop();
    await bouncer.stop();
    await redis.stop();
    await db.drop();
  }
  return lines.join('\n');
}

/** Redis memory per 1M quota counters (measured on `keys`, scaled) and per 10k accounts of scheduler snapshot. */
export async function benchRedisSizing(quotaKeys = Number(process.env.BENCH_SIZING_QUOTA_KEYS ?? 100_000), accounts = Number(process.env.BENCH_SIZING_ACCOUNTS ?? 10_000)): Promise<string> {
  const redis = new Redis(REDIS_URL);
  const prefix = uniqueName('rjsize');
  try {
    const counters = new RedisQuotaCounters(redis, { prefix, env: 'bench' });
    const members = Array.from({ length: quotaKeys }, (_, i) => quotaMember(`user-${i}`, ['openai', 'anthropic', 'gemini'][i % 3]!));
    for (let i = 0; i < members.length; i += 500) await Promise.all(members.slice(i, i + 500).map((m) => counters.increment(m, 1234)));
    for (let i = 0; i < members.length; i += 500) await Promise.all(members.slice(i, i + 500).map((m) => counters.seed(m, 100_000, 1)));
    const quotaBytes = await keyBytes(redis, `${prefix}:bench:quota:*`);
    const snap = await benchSnapshotMemory(accounts);
    return [
      '| what | measured on | bytes | per unit |',
      '|---|---|---|---|',
      `| quota counters (hash + dirty-set member) | ${quotaKeys} keys | ${quotaBytes} | ${(((quotaBytes / quotaKeys) * 1e6) / 2 ** 20).toFixed(0)} MiB per 1M keys |`,
      `| scheduler snapshot (every bucket) | ${snap.accounts} accounts | ${snap.bytes} | ${(((snap.bytes / snap.accounts) * 1e4) / 2 ** 20).toFixed(1)} MiB per 10k accounts |`,
    ].join('\n');
  } finally {
    await dropRedisPrefix(prefix);
    redis.disconnect();
  }
}

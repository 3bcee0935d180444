/**
 * Issue 26's footprint: N idle replicas (`relay-jobs start`), every default job on, no data at
 * all. After BENCH_SETTLE_S (20) it counts, over BENCH_STEADY_S (30), PostgreSQL transactions/s
 * of the bench database only (pg_stat_database xact_commit + xact_rollback delta, minus this
 * harness's own statements) and Redis commands/s of a private redis-server (INFO stats
 * total_commands_processed delta, minus the INFO calls themselves). Once with wake-ups on
 * (the default) and once with `wakeups.enabled: false` (the poll-only path). `BENCH_REPLICAS=1,3,9`.
 */
import { spawn } from 'node:child_process';
import pg from 'pg';
import { Redis } from 'ioredis';
import { CLI, ServiceProcess, cleanEnv } from '../test/helpers/cli.js';
import { PrivateRedis, TEST_MASTER_KEY, freePort, freshDatabase, uniqueName } from '../test/helpers/services.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function redisTotal(url: string): Promise<number> {
  const c = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on('error', () => undefined);
  await c.connect();
  const info = await c.info('stats');
  c.disconnect();
  return Number(/^total_commands_processed:(\d+)/m.exec(info)?.[1] ?? 0);
}

export interface IdleResult {
  replicas: number;
  wakeups: boolean;
  pgTxPerSec: number;
  redisCmdsPerSec: number;
}

export async function runIdle(replicas: number, wakeups: boolean): Promise<IdleResult> {
  const settleS = Number(process.env.BENCH_SETTLE_S ?? 20);
  const steadyS = Number(process.env.BENCH_STEADY_S ?? 30);
  const db = await freshDatabase();
  const redis = await PrivateRedis.start();
  const sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  const procs: ServiceProcess[] = [];
  try {
    const prefix = uniqueName('rjidle');
    for (let i = 0; i < replicas; i++) {
      const env: Record<string, string> = {
        DATABASE_URL: db.url,
        REDIS_URL: redis.url,
        RELAY_JOBS_INSTANCE_ID: `i${i}`,
        RELAY_JOBS_ENV: 'bench',
        RELAY_JOBS_HTTP_PORT: String(await freePort()),
        RELAY_JOBS_ADMIN_TOKEN: 'bench-admin-token-0123456789',
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '3',
        RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: String(replicas),
        RELAY_JOBS__SHUTDOWN__GRACE: '5s',
        RELAY_JOBS__LOGGING__LEVEL: 'warn',
        RELAY_JOBS__WAKEUPS__ENABLED: String(wakeups),
      };
      procs.push(new ServiceProcess(`i${i}`, spawn(process.execPath, [CLI, 'start'], { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })));
    }
    const q = async (text: string) => (await sql.query(text)).rows;
    for (let i = 0; i < 1200; i++) {
      const [r] = await q(`SELECT count(*)::int AS n FROM instances`).catch(() => [{ n: 0 }]);
      if (r.n === replicas) break;
      for (const p of procs) if (p.proc.exitCode !== null) throw new Error(`${p.name} exited:\n${p.lines.slice(-10).join('\n')}`);
      await sleep(100);
    }
    await sleep(settleS * 1000);
    const tx = async () => {
      await q(`SELECT pg_stat_clear_snapshot()`);
      return Number((await q(`SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()`))[0].n);
    };
    const x0 = await tx();
    const r0 = await redisTotal(redis.url);
    const t0 = Date.now();
    await sleep(steadyS * 1000);
    await sleep(1200); // backends report their counters at most once a second
    const x1 = await tx();
    const r1 = await redisTotal(redis.url);
    const secs = (Date.now() - t0) / 1000;
    // Our own: two statements per tx() sample (each its own transaction); one INFO per sample.
    return { replicas, wakeups, pgTxPerSec: (x1 - x0 - 2) / secs, redisCmdsPerSec: (r1 - r0 - 1) / secs };
  } finally {
    for (const p of procs) if (p.proc.exitCode === null) p.proc.kill('SIGTERM');
    await Promise.all(procs.map((p) => p.exited));
    await sql.end();
    await redis.stop();
    await db.drop();
  }
}

export function idleTable(rows: IdleResult[]): string {
  const lines = ['| replicas | wake-ups | PG transactions/s | Redis commands/s |', '|---|---|---|---|'];
  for (const r of rows) lines.push(`| ${r.replicas} | ${r.wakeups ? 'on' : 'off'} | ${r.pgTxPerSec.toFixed(1)} | ${r.redisCmdsPerSec.toFixed(1)} |`);
  return lines.join('\n');
}

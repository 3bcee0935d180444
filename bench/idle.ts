/**
 * Issue 26's footprint: N idle replicas (`relay-jobs start`), every default job on, no data at
 * all. After BENCH_SETTLE_S (20) it counts, over BENCH_STEADY_S (30), PostgreSQL transactions/s
 * of the bench database only (pg_stat_database xact_commit + xact_rollback delta, minus this
 * harness's own statements) and Redis commands/s of a private redis-server (INFO stats
 * total_commands_processed delta, minus the INFO calls themselves), and each replica's CPU over the
 * same window (/proc, % of one core) and resident memory at its end. Once with wake-ups on
 * (the default) and once with `wakeups.enabled: false` (the poll-only path). `BENCH_REPLICAS=1,3,9`.
 * `BENCH_EMBEDDED=1` adds one embedded service (PGlite in its process, a data directory of its own),
 * CPU and memory only.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { CLI, ServiceProcess, cleanEnv } from '../test/helpers/cli.js';
import { PrivateRedis, freePort, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { footprint, processFigures, replicaEnv, sleep, type ProcessFigures } from './replicas.js';
import { logStatements, printAttribution, redisCommandStats, statementCounts, statementsWanted } from './statement-log.js';

export interface IdleResult extends ProcessFigures {
  /** How many cluster replicas, or `embedded`: one service with PGlite in its process. */
  replicas: number | 'embedded';
  wakeups: boolean;
  /** Null for the embedded service: it has no server to count. */
  pgTxPerSec: number | null;
  redisCmdsPerSec: number | null;
}

/** One idle embedded service: CPU and resident memory over the steady window, after the settle. */
export async function runIdleEmbedded(): Promise<IdleResult> {
  const settleS = Number(process.env.BENCH_SETTLE_S ?? 20);
  const steadyS = Number(process.env.BENCH_STEADY_S ?? 30);
  const dir = mkdtempSync(join(tmpdir(), 'rj-idle-embedded-'));
  const port = await freePort();
  const env = { RELAY_JOBS_DATA_DIR: join(dir, 'data'), RELAY_JOBS_HTTP_PORT: String(port), RELAY_JOBS__LOGGING__LEVEL: 'warn' };
  const svc = new ServiceProcess('embedded', spawn(process.execPath, [CLI, 'start'], { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] }));
  try {
    for (let i = 0; ; i++) {
      if (
        await fetch(`http://127.0.0.1:${port}/readyz`).then(
          (r) => r.ok,
          () => false,
        )
      )
        break;
      if (svc.proc.exitCode !== null || i > 1200) throw new Error(`the embedded service did not get ready:\n${svc.lines.slice(-10).join('\n')}`);
      await sleep(100);
    }
    await sleep(settleS * 1000);
    return { replicas: 'embedded', wakeups: true, pgTxPerSec: null, redisCmdsPerSec: null, ...(await processFigures([svc.proc.pid!], steadyS)) };
  } finally {
    if (svc.proc.exitCode === null) svc.proc.kill('SIGTERM');
    await svc.exited;
    rmSync(dir, { recursive: true, force: true });
  }
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
    const q = async (text: string) => (await sql.query(text)).rows;
    if (statementsWanted()) await logStatements(q, db.name);
    const prefix = uniqueName('rjidle');
    for (let i = 0; i < replicas; i++) {
      const env = await replicaEnv(
        `i${i}`,
        { dbUrl: db.url, redisUrl: redis.url, prefix },
        {
          RELAY_JOBS__DATABASE__POOL_SIZE: '3',
          RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: String(replicas),
          RELAY_JOBS__LOGGING__LEVEL: 'warn',
          RELAY_JOBS__WAKEUPS__ENABLED: String(wakeups),
        },
      );
      procs.push(new ServiceProcess(`i${i}`, spawn(process.execPath, [CLI, 'start'], { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })));
    }
    for (let i = 0; i < 1200; i++) {
      const [r] = await q(`SELECT count(*)::int AS n FROM instances`).catch(() => [{ n: 0 }]);
      if (r.n === replicas) break;
      for (const p of procs) if (p.proc.exitCode !== null) throw new Error(`${p.name} exited:\n${p.lines.slice(-10).join('\n')}`);
      await sleep(100);
    }
    await sleep(settleS * 1000);
    const pids = procs.map((p) => p.proc.pid!);
    if (!statementsWanted()) return { replicas, wakeups, ...(await footprint(q, redis.url, steadyS, pids)) };
    const [t0, r0] = [Date.now(), await redisCommandStats(redis.url)];
    const f = await footprint(q, redis.url, steadyS, pids);
    const [t1, r1] = [Date.now(), await redisCommandStats(redis.url)];
    printAttribution(`${replicas} replicas, wake-ups ${wakeups ? 'on' : 'off'}`, await statementCounts(db.name, t0, t1), r0, r1, (t1 - t0) / 1000);
    return { replicas, wakeups, ...f };
  } finally {
    for (const p of procs) if (p.proc.exitCode === null) p.proc.kill('SIGTERM');
    await Promise.all(procs.map((p) => p.exited));
    await sql.end();
    await redis.stop();
    await db.drop();
  }
}

export function idleTable(rows: IdleResult[]): string {
  const lines = ['| replicas | wake-ups | PG transactions/s | Redis commands/s | CPU per replica (% of a core) | RSS per replica (MiB) |', '|---|---|---|---|---|---|'];
  const rate = (x: number | null) => (x === null ? '—' : x.toFixed(1));
  for (const r of rows)
    lines.push(`| ${r.replicas} | ${r.wakeups ? 'on' : 'off'} | ${rate(r.pgTxPerSec)} | ${rate(r.redisCmdsPerSec)} | ${r.replicaCpuPct.toFixed(2)} | ${r.replicaRssMiB.toFixed(0)} |`);
  return lines.join('\n');
}

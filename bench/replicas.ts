/**
 * What the multi-replica benchmarks share (cluster-scenario, idle, topology): one replica's
 * environment, the 1 s canary, and the footprint reading (PostgreSQL transactions/s of the bench
 * database, Redis commands/s of a private redis-server, optionally the replicas' CPU) over a steady window.
 */
import { JOBS } from '../src/app/registry.js';
import { TEST_MASTER_KEY, freePort } from '../test/helpers/services.js';
import { HZ, readStat } from '../test/helpers/machine-load.js';
import { redisTotal } from './scaling-log.js';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every job of the registry but the canary and token_refresh; a scenario turns off these and whichever of the two it does not measure. */
export const OTHER_JOBS = JOBS.map((j) => j.name).filter((n) => n !== 'canary' && n !== 'token_refresh');

/** `RELAY_JOBS__JOBS__<NAME>__ENABLED=false` for each job named. */
export const jobsOff = (names: readonly string[]): Record<string, string> => Object.fromEntries(names.map((j) => [`RELAY_JOBS__JOBS__${j.toUpperCase()}__ENABLED`, 'false']));

/** The issue-18 canary: one cluster round a second, sleeping 300 ms, lock_ttl 3 s. */
export const CANARY_EVERY_SECOND: Record<string, string> = {
  RELAY_JOBS__JOBS__CANARY__ENABLED: 'true',
  RELAY_JOBS__JOBS__CANARY__EVERY: '1s',
  RELAY_JOBS__JOBS__CANARY__SLEEP: '300ms',
  RELAY_JOBS__JOBS__CANARY__TIMEOUT: '2s',
  RELAY_JOBS__JOBS__CANARY__LOCK_TTL: '3s',
};

/** One bench replica: its identity, a free port, the shared secrets and key prefix, a short grace; `extra` on top. */
export async function replicaEnv(id: string, o: { dbUrl: string; redisUrl: string; prefix: string }, extra: Record<string, string> = {}): Promise<Record<string, string>> {
  return {
    DATABASE_URL: o.dbUrl,
    REDIS_URL: o.redisUrl,
    RELAY_JOBS_INSTANCE_ID: id,
    RELAY_JOBS_ENV: 'bench',
    RELAY_JOBS_HTTP_PORT: String(await freePort()),
    RELAY_JOBS_ADMIN_TOKEN: 'bench-admin-token-0123456789',
    RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
    RELAY_JOBS__REDIS__KEY_PREFIX: o.prefix,
    RELAY_JOBS__SHUTDOWN__GRACE: '5s',
    ...extra,
  };
}

/**
 * PostgreSQL transactions/s of the bench database (pg_stat_database xact_commit + xact_rollback)
 * and Redis commands/s (INFO total_commands_processed) over `steadyS`, minus this reading's own:
 * two transactions between the samples (the first sample's SELECT, the second's snapshot clear)
 * and one INFO. With `pids` (the replicas' processes), also their CPU and memory (`processFigures`).
 */
export async function footprint(
  query: (sql: string) => Promise<Array<Record<string, unknown>>>,
  redisUrl: string,
  steadyS: number,
  pids: readonly number[] = [],
): Promise<{ pgTxPerSec: number; redisCmdsPerSec: number } & ProcessFigures> {
  const tx = async () => {
    await query(`SELECT pg_stat_clear_snapshot()`);
    return Number((await query(`SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()`))[0]!.n);
  };
  const x0 = await tx();
  const r0 = await redisTotal(redisUrl);
  const t0 = Date.now();
  const figures = await processFigures(pids, steadyS);
  await sleep(1200); // backends report their counters at most once a second
  const x1 = await tx();
  const r1 = await redisTotal(redisUrl);
  const secs = (Date.now() - t0) / 1000;
  return { pgTxPerSec: (x1 - x0 - 2) / secs, redisCmdsPerSec: (r1 - r0 - 1) / secs, ...figures };
}

export interface ProcessFigures {
  /** CPU over the window as a share of one core, averaged over the processes. */
  replicaCpuPct: number;
  /** Resident memory at the window's end, averaged over the processes. */
  replicaRssMiB: number;
}

/**
 * What `pids` (the replicas' processes) used over `steadyS` seconds, from Linux /proc: their own
 * threads' CPU (not their children's) and their resident memory at the end (0 and 0 without pids).
 */
export async function processFigures(pids: readonly number[], steadyS: number): Promise<ProcessFigures> {
  const cpu = () => pids.reduce((sum, pid) => sum + readStat(String(pid)).self / HZ, 0);
  const c0 = cpu();
  const t0 = Date.now();
  await sleep(steadyS * 1000);
  const c1 = cpu();
  const secs = (Date.now() - t0) / 1000;
  if (!pids.length) return { replicaCpuPct: 0, replicaRssMiB: 0 };
  const rss = pids.reduce((sum, pid) => sum + (readStat(String(pid)).rssPages * 4096) / 2 ** 20, 0);
  return { replicaCpuPct: ((c1 - c0) / secs / pids.length) * 100, replicaRssMiB: rss / pids.length };
}

/**
 * A replica's start-up: CPU seconds, page faults and resident memory of one `relay-jobs start`
 * in cluster mode (a database of its own, migrated by an uncounted first start; a private
 * redis-server) and in embedded mode (a data directory of its own, created by that first start) from spawn until
 * `/readyz` answers 200, BENCH_STARTS (10) times, medians. The baseline, measured in the same run,
 * is a bare `node -e 0` with the same flags: what any Node.js process costs here. `BENCH_BASE_CLI`
 * adds the same figures for another build (e.g. the previous commit's `.test-dist/cli/main.js`).
 * Tests and replicas start by the dozen, so start-up CPU is what a test suite and a rolling
 * restart pay per process; on a paravirtualised VM each page fault costs ~10 µs, so faults count.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, NODE_FLAGS, cleanEnv } from '../test/helpers/cli.js';
import { PrivateRedis, freePort, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { HZ, readStat } from '../test/helpers/machine-load.js';
import { replicaEnv, sleep } from './replicas.js';
import { EMBEDDED_SHARED_BUFFERS_MB } from '../src/config/schema.js';
import { PgliteDb } from '../src/store/pglite-db.js';

export interface StartupResult {
  build: string;
  starts: number;
  cpuMs: number;
  minorFaults: number;
  rssMiB: number;
}

type Sample = { cpuMs: number; minorFaults: number; rssMiB: number };

/** utime + stime (ms), minor faults and RSS (MiB) of a live process, from /proc/<pid>/stat. */
function procStat(pid: number): Sample {
  const s = readStat(String(pid));
  return { cpuMs: (s.self * 1000) / HZ, minorFaults: s.minorFaults, rssMiB: (s.rssPages * 4096) / 2 ** 20 };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** One start until ready; the figures read just before SIGTERM. */
async function oneStart(cli: string, env: Record<string, string>): Promise<Sample> {
  const proc = spawn(process.execPath, [...NODE_FLAGS, cli, 'start'], { env: cleanEnv(env), stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<void>((r) => proc.on('close', () => r()));
  try {
    for (let i = 0; ; i++) {
      if (proc.exitCode !== null) throw new Error(`relay-jobs start exited with ${proc.exitCode} before it was ready:\n${stderr}`);
      if (i > 600) throw new Error('relay-jobs start was not ready within 60 s');
      const ok = await fetch(`http://127.0.0.1:${env.RELAY_JOBS_HTTP_PORT}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) return procStat(proc.pid!);
      await sleep(20);
    }
  } finally {
    proc.kill('SIGTERM');
    await exited;
  }
}

async function bareNode(): Promise<Sample> {
  // Read before it exits: a bare process that waits for its stdin to close.
  const proc = spawn(process.execPath, [...NODE_FLAGS, '-e', 'process.stdin.resume(); process.stdout.write("up")'], { stdio: ['pipe', 'pipe', 'ignore'] });
  await new Promise<void>((r) => proc.stdout.once('data', () => r()));
  await sleep(50);
  const s = procStat(proc.pid!);
  proc.stdin.end();
  await new Promise((r) => proc.on('close', r));
  return s;
}

export async function benchStartup(starts = Number(process.env.BENCH_STARTS ?? 10)): Promise<StartupResult[]> {
  const db = await freshDatabase();
  const redis = await PrivateRedis.start();
  const dataRoot = mkdtempSync(join(tmpdir(), 'rj-startup-'));
  const builds: Array<[string, string]> = [['this build', CLI]];
  if (process.env.BENCH_BASE_CLI) builds.unshift(['before (base)', process.env.BENCH_BASE_CLI]);
  const prefix = uniqueName('rjstart');
  const quiet = { RELAY_JOBS__LOGGING__LEVEL: 'warn' };
  /** Each build in each mode: cluster (the bench database and Redis) and embedded (a data directory of its own). */
  const runs = builds.flatMap(([build, cli], b) => [
    { name: `${build}, cluster`, cli, env: async (id: string) => replicaEnv(id, { dbUrl: db.url, redisUrl: redis.url, prefix }, quiet) },
    { name: `${build}, embedded`, cli, env: async () => ({ RELAY_JOBS_DATA_DIR: join(dataRoot, `b${b}`), RELAY_JOBS_HTTP_PORT: String(await freePort()), ...quiet }) },
  ]);
  const samples = new Map<string, Sample[]>([['bare node -e (baseline)', []], ...runs.map((r): [string, Sample[]] => [r.name, []])]);
  try {
    // One start each first, not counted: it migrates the empty database (creates the embedded one) and warms the page cache.
    for (const r of runs) await oneStart(r.cli, await r.env('warm'));
    // Interleaved, so a change in the machine's load falls on every build alike.
    for (let i = 0; i < starts; i++) {
      samples.get('bare node -e (baseline)')!.push(await bareNode());
      for (const r of runs) samples.get(r.name)!.push(await oneStart(r.cli, await r.env(`s${i}`)));
    }
  } finally {
    await redis.stop();
    await db.drop();
    rmSync(dataRoot, { recursive: true, force: true });
  }
  return [...samples].map(([build, s]) => ({
    build,
    starts: s.length,
    cpuMs: median(s.map((x) => x.cpuMs)),
    minorFaults: median(s.map((x) => x.minorFaults)),
    rssMiB: median(s.map((x) => x.rssMiB)),
  }));
}

export function startupTable(rows: StartupResult[]): string {
  const base = rows.find((r) => r.build.startsWith('bare'))!;
  const lines = ['| process | starts | CPU ms to ready (median) | minor page faults | RSS MiB | CPU / bare node |', '|---|---|---|---|---|---|'];
  for (const r of rows) lines.push(`| ${r.build} | ${r.starts} | ${r.cpuMs} | ${r.minorFaults} | ${r.rssMiB.toFixed(0)} | ${(r.cpuMs / base.cpuMs).toFixed(1)}x |`);
  return lines.join('\n');
}

export interface PgliteOpenResult {
  sharedBuffersMb: number;
  opens: number;
  cpuMs: number;
  minorFaults: number;
}

/**
 * One PGlite open (an existing data directory, until it answers a query) in this process, at
 * PostgreSQL's default buffer pool (128 MB, the baseline) and at `database.embedded_shared_buffers_mb`'s
 * default: CPU and minor page faults of the open, medians, alternated open by open. PGlite touches
 * its whole pool at every open.
 */
export async function benchPgliteOpen(opens = Number(process.env.BENCH_PGLITE_OPENS ?? 7)): Promise<PgliteOpenResult[]> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rj-pglite-open-'));
  const sizes = [128, EMBEDDED_SHARED_BUFFERS_MB];
  const samples = new Map<number, Array<{ cpuMs: number; minorFaults: number }>>(sizes.map((mb) => [mb, []]));
  try {
    // Creates the database and compiles PGlite's WebAssembly once, not counted.
    await (await PgliteDb.open(dataDir)).close();
    for (let i = 0; i < opens; i++) {
      for (const mb of sizes) {
        const before = readStat('self');
        const db = await PgliteDb.open(dataDir, { sharedBuffersMb: mb });
        await db.query('SELECT 1');
        const after = readStat('self');
        samples.get(mb)!.push({ cpuMs: ((after.self - before.self) * 1000) / HZ, minorFaults: after.minorFaults - before.minorFaults });
        await db.close();
      }
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
  return sizes.map((mb) => {
    const s = samples.get(mb)!;
    return { sharedBuffersMb: mb, opens: s.length, cpuMs: median(s.map((x) => x.cpuMs)), minorFaults: median(s.map((x) => x.minorFaults)) };
  });
}

export function pgliteOpenTable(rows: PgliteOpenResult[]): string {
  const base = rows[0]!;
  const lines = ['| shared_buffers | opens | CPU ms (median) | minor page faults | CPU / 128 MB |', '|---|---|---|---|---|'];
  for (const r of rows)
    lines.push(`| ${r.sharedBuffersMb} MB${r === base ? " (PostgreSQL's default, baseline)" : ''} | ${r.opens} | ${r.cpuMs} | ${r.minorFaults} | ${(r.cpuMs / base.cpuMs).toFixed(2)}x |`);
  return lines.join('\n');
}

// Opt-in per-file cost report (vitest setup file, active when RELAY_TEST_CPU_DIR is set): writes
// one JSON per test file with the CPU seconds and minor page faults its worker and every child it
// waited for (spawned replicas, CLI runs) used between the file's first and last hook, how many
// relay-jobs services and one-shot CLI runs it started (test/helpers/cli.ts), the wall time, and when and in
// which worker it ran (epoch ms and pid: a process sampled meanwhile, e.g. a PostgreSQL backend or a
// replica whose parent is that worker, can be matched to its file). Used to find where the suite's
// time goes: `RELAY_TEST_CPU_DIR=/tmp/cpu npx vitest run`, then `node scripts/test-cost.mjs
// /tmp/cpu`. CPU of the servers the tests share (PostgreSQL) is not in it: machine-load.ts reports
// that and the rest of the machine.
import { afterAll, beforeAll, expect } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { started } from './cli.js';
import { HZ, readStat } from './machine-load.js';

/** This process's CPU (seconds) and minor page faults, its own and those of every child it waited for (Linux /proc; 0 elsewhere). */
function usage(): { cpu: number; children: number; faults: number; cliRuns: number; services: number } {
  try {
    const s = readStat('self');
    return { cpu: (s.self + s.reaped) / HZ, children: s.reaped / HZ, faults: s.minorFaults + s.reapedMinorFaults, ...started };
  } catch {
    return { cpu: 0, children: 0, faults: 0, ...started };
  }
}

const dir = process.env.RELAY_TEST_CPU_DIR;
if (dir) {
  let u0 = usage();
  let wall0 = 0;
  beforeAll(() => {
    u0 = usage();
    wall0 = Date.now();
  });
  afterAll(() => {
    const file = expect.getState().testPath ?? 'unknown';
    mkdirSync(dir, { recursive: true });
    const end = Date.now();
    const u = usage();
    writeFileSync(
      join(dir, `${basename(file)}.json`),
      JSON.stringify({
        file: basename(file),
        cpu_s: u.cpu - u0.cpu,
        children_cpu_s: u.children - u0.children,
        minor_faults: u.faults - u0.faults,
        cli_runs: u.cliRuns - u0.cliRuns,
        services: u.services - u0.services,
        wall_s: (end - wall0) / 1000,
        start_ms: wall0,
        end_ms: end,
        pid: process.pid,
      }),
    );
  });
}

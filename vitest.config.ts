import { defineConfig } from 'vitest/config';
import SlowestFirst from './test/helpers/slowest-first.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Builds the CLI the tests spawn into .test-dist/ (never dist/), only when src/ changed.
    // With RELAY_TEST_CPU_DIR, also what the whole machine spent meanwhile (machine-load.ts).
    globalSetup: ['test/helpers/build-cli.ts', 'test/helpers/machine-load.ts'],
    // Hooks for every file (cluster log tails on failure), and the opt-in per-file CPU and wall
    // report (RELAY_TEST_CPU_DIR; scripts/test-cost.mjs prints it).
    setupFiles: ['test/helpers/per-file.ts', 'test/helpers/cpu-probe.ts'],
    // Limits with real margins: a cold embedded (PGlite) open takes 8-14 s on a quiet machine and
    // over a minute at load average 30 on two cores. Waits inside tests poll for their condition.
    testTimeout: 180_000,
    hookTimeout: 180_000,
    // Longest files first (test/helpers/slowest-first.ts): the run does not end on one long file alone.
    sequence: { sequencer: SlowestFirst },
    pool: 'forks',
    // Workers open PGlite dozens of times, each a fresh WebAssembly compile: V8's background
    // optimisation of it (TurboFan tier-up) costs more than a test's few queries win back.
    execArgv: ['--liftoff-only'],
    // A worker runs its files one after another in one process: each file no longer pays for a
    // fresh process and a fresh import of src/ (half the CPU of the small files). Files keep their
    // own databases, key prefixes and ports; nothing may rely on a fresh module state.
    isolate: false,
    // Five files at a time: the end-to-end files mostly wait (a cluster idles between its faults, a
    // monitor window is real time), so more workers than cores fill them. Full runs on two quiet
    // cores (2026-12-02, this machine, morning): 4 workers 257-274 s, 5 workers 214-231 s with the
    // test processes and PostgreSQL/Redis using about 1.6 of the 2 cores; the same machine ran the
    // same code in 275-306 s that afternoon, and another machine of the same kind took 452-600 s
    // (twice the CPU seconds for the same files; load average 11-18). 3-Dec-2026, a third machine,
    // quiet, with --liftoff-only: 303-362 s, the two cores about 90% busy (a sixth worker: no
    // gain, 314 s against 303-322). 4-Dec-2026, a fourth machine: 227-240 s (cores 95% busy).
    // The shared PostgreSQL's 100
    // connections bound this: five files' clusters peaked at 56 once the harness pool went to 4
    // and the two default-pool files got servers of their own (test/helpers/cluster.ts).
    maxWorkers: 5,
  },
});

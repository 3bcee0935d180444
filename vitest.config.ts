import { defineConfig } from 'vitest/config';
import SlowestFirst from './test/helpers/slowest-first.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Issue 52: every answer of a route with a contract is checked against the OpenAPI document
    // (src/http/contract-check.ts); a drifted answer is a 500 contract_violation, so the test touching it fails.
    env: { RELAY_JOBS_CONTRACT_CHECK: '1' },
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
    // expect.poll's own default is 1 s, less than one tick of the things it is used to watch (a page
    // updated from a once-a-second event stream, a round requested through the scheduler).
    expect: { poll: { timeout: 20_000 } },
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
    // Four files at a time: the end-to-end files mostly wait (a cluster idles between its faults, a
    // monitor window is real time), so more workers than cores fill them. But waiting is not free:
    // an idle replica costs up to 2% of a core (bench/idle.ts), a test's waitFor polls, PostgreSQL
    // serves their heartbeats, all by the second. A fifth worker on two cores stretches every file's
    // wall time and with it that cost. 4-Dec-2026, machine f (page fault 12 us, new PostgreSQL connection 20 ms):
    // 5 workers 369-419 s at 714-801 busy CPU s a run; 4 workers 314-372 s (five runs, the CPU of
    // consecutive runs creeping up) at 602-709 CPU s, the files' wall time summed 1206-1408 s against
    // 1738-1879; 3 workers 333 s (cores 87% busy).
    // Earlier machines (2-Dec a, quiet): 4 workers 257-274 s, 5 workers 214-231 s; `npx vitest run
    // --maxWorkers=5` there. The shared PostgreSQL's 100 connections bound this too: five files'
    // clusters peaked at 56 once the harness pool went to 4 (test/helpers/cluster.ts).
    maxWorkers: 4,
  },
});

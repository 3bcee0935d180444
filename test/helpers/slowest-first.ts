// vitest sequencer: the longest files start first, so the workers do not end the run with one
// long end-to-end file running alone. With a results cache (a previous run on this machine) the
// measured durations decide; without one (a fresh CI checkout), the files named in SLOW_FIRST
// (the slowest of a measured full run, longest first) lead, then every other end-to-end file, then
// the rest in vitest's own order.
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Longest first, from a full run's per-file wall times (update from a RELAY_TEST_CPU_DIR report, scripts/test-cost.mjs). */
export const SLOW_FIRST = [
  // From the full runs of 2026-12-02 08:02-08:14 UTC (RELAY_TEST_CPU_DIR wall times, five workers), longest first.
  'test/redis-outage-load.e2e.test.ts',
  // Not in that run: packs (a tsc and Vite build, ~35 CPU s), installs and starts the package (~70 s).
  'test/package.test.ts',
  'test/sql-embedded.test.ts',
  'test/cli.test.ts',
  'test/billing.e2e.test.ts',
  'test/ops.e2e.test.ts',
  'test/token-refresh.e2e.test.ts',
  'test/refresh-deadline.e2e.test.ts',
  'test/probes-cluster.e2e.test.ts',
  'test/process.test.ts',
  'test/slow-clients.e2e.test.ts',
  'test/refresh-shards.e2e.test.ts',
  'test/image-batches.e2e.test.ts',
  'test/console.test.ts',
  'test/scheduler-snapshot.e2e.test.ts',
  'test/refresh-takeover.e2e.test.ts',
  'test/backup-cluster.e2e.test.ts',
  'test/redis-topologies.test.ts',
];

function rank(spec: TestSpecification): number {
  const file = spec.moduleId.replace(/\\/g, '/');
  const i = SLOW_FIRST.findIndex((f) => file.endsWith(`/${f}`));
  if (i >= 0) return i;
  return /\.e2e\.test\.ts$/.test(file) ? SLOW_FIRST.length : SLOW_FIRST.length + 1;
}

export default class SlowestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const base = await super.sort(files);
    const measured = base.every((f) => this.ctx.cache.getFileTestResults(`${f.project.name}:${f.moduleId.slice(this.ctx.config.root.length + 1)}`));
    if (measured) return base;
    return base
      .map((f, i) => ({ f, i, r: rank(f) }))
      .sort((a, b) => a.r - b.r || a.i - b.i)
      .map((x) => x.f);
  }
}

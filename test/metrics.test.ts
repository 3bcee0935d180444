import { describe, expect, it } from 'vitest';
import { execFileSync, spawnSync } from 'node:child_process';
import { Metrics } from '../src/telemetry/metrics.js';
import { withAreaMetrics } from '../src/app/services-wiring.js';

const promtool = spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' }).stdout.trim();

/** The exposition a scrape sees: the kernel's metrics and every area's groups, as a runtime registers them. */
async function exposition(): Promise<{ text: string; families: Array<{ name: string; type: string }> }> {
  const m = withAreaMetrics(new Metrics({ defaultMetrics: true }));
  const families = (await m.registry.getMetricsAsJSON()).map((f) => ({ name: f.name, type: String(f.type) }));
  return { text: await m.registry.metrics(), families };
}

describe('/metrics naming', () => {
  it('counters end in _total, nothing else does; our own names start relay_jobs_ once', async () => {
    const { families } = await exposition();
    for (const f of families) {
      if (f.type === 'counter') expect(f.name, f.name).toMatch(/_total$/);
      else expect(f.name, `${f.type} ${f.name}`).not.toMatch(/_total$/);
      expect(f.name, f.name).toMatch(/^(relay_jobs_(?!.*relay_jobs_)|process_|nodejs_)/);
    }
  });

  it("Node's default metrics keep their standard names (Node.js dashboards match)", async () => {
    const names = new Set((await exposition()).families.map((f) => f.name));
    for (const n of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_heap_size_used_bytes', 'nodejs_eventloop_lag_seconds', 'nodejs_active_handles'])
      expect(names.has(n), n).toBe(true);
  });

  it.skipIf(!promtool)('`promtool check metrics` passes', async () => {
    const { text } = await exposition();
    // promtool exits non-zero and prints one line per problem; execFileSync throws with that output.
    expect(() => execFileSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] })).not.toThrow();
  });
});

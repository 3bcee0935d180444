import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { Metrics } from '../src/telemetry/metrics.js';
import { withAreaMetrics } from '../src/app/services-wiring.js';

const dir = (p: string) => new URL(`../deploy/${p}`, import.meta.url).pathname;

/** Every `relay_jobs_*` name in a file, histogram series folded onto their metric. */
function names(text: string): string[] {
  return [...new Set([...text.matchAll(/relay_jobs_[a-z0-9_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, '')))];
}

function hasPromtool(): boolean {
  try {
    execFileSync('promtool', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('deploy/: Prometheus rules and the Grafana dashboard', () => {
  const exported = new Set(
    withAreaMetrics(new Metrics())
      .registry.getMetricsAsArray()
      .map((m) => (m as unknown as { name: string }).name),
  );

  it('name only metrics the runtime exports', () => {
    for (const file of ['prometheus/alerts.yml', 'prometheus/alerts.test.yml', 'grafana/relay-jobs.json']) {
      const used = names(readFileSync(dir(file), 'utf8'));
      expect(used.length, file).toBeGreaterThan(3);
      expect(
        used.filter((n) => !exported.has(n)),
        `${file} names metrics nobody exports`,
      ).toEqual([]);
    }
    const dash = JSON.parse(readFileSync(dir('grafana/relay-jobs.json'), 'utf8'));
    expect(dash.panels.every((p: { targets: unknown[] }) => p.targets.length > 0)).toBe(true);
  });

  it.runIf(hasPromtool())('promtool: the rules are valid and their unit tests pass', () => {
    execFileSync('promtool', ['check', 'rules', dir('prometheus/alerts.yml')], { stdio: 'pipe' });
    execFileSync('promtool', ['test', 'rules', dir('prometheus/alerts.test.yml')], { stdio: 'pipe' });
  });
});

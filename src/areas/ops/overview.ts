import type { Ops } from './ops-services.js';
import { fold } from './catalogue.js';
import { bucketInstance, type CollectedInstance } from './ops-collector.js';

export interface OverviewInput {
  ops: Ops;
  bucketMs: number;
  alertIntervalMs: number;
  now: number;
  jobs: Array<{ name: string; health: string; enabled: boolean }>;
  instances: CollectedInstance[];
}

const clamp = (x: number) => Math.max(0, Math.min(100, Math.round(x)));

/**
 * The cluster at a glance. The health score (0-100) is a weighted mean of parts, each shown:
 * errors (5xx rate over the last 5 buckets: 100 under 1 %, 0 at 20 %), jobs (share of enabled
 * jobs healthy or idle), alerts (100 minus 30 per critical and 10 per warning firing), and
 * freshness (100 when the collector's newest bucket is recent, else 0). Each instance carries its
 * process figures from its newest heartbeat, or null when that beat is not fresh.
 */
export async function overview(i: OverviewInput) {
  const latest = await i.ops.series.latest();
  const fresh = latest !== null && latest.bucket.getTime() + i.bucketMs * 3 + i.alertIntervalMs >= i.now;
  const recent = latest ? await i.ops.series.window(latest.bucket, i.bucketMs * 5) : [];
  const errorRate = fold('error_rate', recent, i.bucketMs / 1000);
  const firing = await i.ops.alerts.events({ state: 'firing', limit: 1000 });
  const enabled = i.jobs.filter((j) => j.enabled);
  const byHealth: Record<string, number> = {};
  for (const j of i.jobs) byHealth[j.health] = (byHealth[j.health] ?? 0) + 1;
  const okJobs = enabled.filter((j) => j.health === 'healthy' || j.health === 'idle').length;
  const parts = {
    errors: errorRate === null ? null : clamp(100 - Math.max(0, errorRate - 0.01) * (100 / 0.19)),
    jobs: enabled.length ? clamp((okJobs / enabled.length) * 100) : 100,
    alerts: clamp(100 - 30 * firing.filter((e) => e.severity === 'critical' && !e.silenced).length - 10 * firing.filter((e) => e.severity === 'warning' && !e.silenced).length),
    freshness: fresh ? 100 : 0,
  };
  const weights = { errors: 0.35, jobs: 0.25, alerts: 0.25, freshness: 0.15 };
  let sum = 0;
  let w = 0;
  for (const [k, v] of Object.entries(parts)) {
    if (v === null) continue;
    sum += v * weights[k as keyof typeof weights];
    w += weights[k as keyof typeof weights];
  }
  return {
    health_score: w ? Math.round(sum / w) : null,
    health_parts: { ...parts, error_rate: errorRate },
    latest_bucket: latest?.bucket.toISOString() ?? null,
    latest_metrics: latest?.metrics ?? null,
    collector_fresh: fresh,
    firing_alerts: firing,
    jobs_by_health: byHealth,
    instances: i.instances.map(bucketInstance),
  };
}

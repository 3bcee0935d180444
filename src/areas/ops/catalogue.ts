/**
 * The collected series and how a window of buckets folds into one value for an alert rule or a
 * chart. `sum` adds counts, `ratio` divides two sums (so a rate over 5 minutes weighs each
 * request once, not each minute), `per_second` divides a sum by the window's covered seconds,
 * `max`/`avg` fold per-bucket values, `last` is the newest bucket's value (states: accounts in
 * error, jobs failing). A series absent from every bucket of the window is unknown (null).
 */
export type Fold = { kind: 'sum' | 'max' | 'avg' | 'last' } | { kind: 'ratio'; num: string; den: string } | { kind: 'per_second'; of: string };

export const SERIES: Record<string, Fold> = {
  request_count: { kind: 'sum' },
  error_count: { kind: 'sum' },
  rate_limit_count: { kind: 'sum' },
  input_tokens: { kind: 'sum' },
  output_tokens: { kind: 'sum' },
  error_rate: { kind: 'ratio', num: 'error_count', den: 'request_count' },
  rate_limit_rate: { kind: 'ratio', num: 'rate_limit_count', den: 'request_count' },
  qps: { kind: 'per_second', of: 'request_count' },
  tps: { kind: 'per_second', of: 'output_tokens' },
  p50_latency_ms: { kind: 'max' },
  p95_latency_ms: { kind: 'max' },
  p99_latency_ms: { kind: 'max' },
  accounts_active: { kind: 'last' },
  accounts_error: { kind: 'last' },
  accounts_expired: { kind: 'last' },
  accounts_rate_limited: { kind: 'last' },
  accounts_paused: { kind: 'last' },
  proxies_expired: { kind: 'last' },
  proxies_expiring: { kind: 'last' },
  jobs_healthy: { kind: 'last' },
  jobs_late: { kind: 'last' },
  jobs_stuck: { kind: 'last' },
  jobs_failing: { kind: 'last' },
  notification_backlog: { kind: 'last' },
  notification_rate_limited: { kind: 'last' },
  outbox_lag_seconds: { kind: 'last' },
  usage_queue: { kind: 'max' },
  db_latency_ms: { kind: 'avg' },
  redis_latency_ms: { kind: 'avg' },
  db_pool_in_use: { kind: 'max' },
  instances_alive: { kind: 'last' },
  // Process figures: each bucket holds the worst fresh live replica's (max over replicas).
  event_loop_lag_ms: { kind: 'max' },
  rss_bytes: { kind: 'max' },
  heap_used_bytes: { kind: 'max' },
  cpu_percent: { kind: 'max' },
  // Issue 50, for the default rules: cluster-wide, read from the database.
  accounts_refresh_failing: { kind: 'last' },
  accounts_refresh_failing_ratio: { kind: 'last' },
  scheduler_outbox_lag_seconds: { kind: 'last' },
  backup_age_seconds: { kind: 'last' },
  replicas_dead: { kind: 'last' },
  // Every replica's own counters, summed over the replicas (ops_counter_increments).
  usage_dropped: { kind: 'sum' },
  usage_spilled: { kind: 'sum' },
  quota_flush_errors: { kind: 'sum' },
};

export const SERIES_NAMES = Object.keys(SERIES);

export type Values = Record<string, number | null>;

/** Folds buckets (oldest first) into one value of `series`; null when unknown. */
export function fold(series: string, buckets: Array<{ metrics: Values }>, bucketSeconds: number): number | null {
  const f = SERIES[series];
  if (!f || !buckets.length) return null;
  const vals = (name: string) => buckets.map((b) => b.metrics[name]).filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
  const sum = (name: string) => {
    const v = vals(name);
    return v.length ? v.reduce((a, b) => a + b, 0) : null;
  };
  switch (f.kind) {
    case 'sum':
      return sum(series);
    case 'max': {
      const v = vals(series);
      return v.length ? Math.max(...v) : null;
    }
    case 'avg': {
      const v = vals(series);
      return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
    }
    case 'last': {
      const v = buckets[buckets.length - 1]!.metrics[series];
      return typeof v === 'number' ? v : null;
    }
    case 'ratio': {
      const n = sum(f.num);
      const d = sum(f.den);
      if (n === null || d === null) return null;
      return d === 0 ? 0 : n / d;
    }
    case 'per_second': {
      const n = sum(f.of);
      return n === null ? null : n / (buckets.length * bucketSeconds);
    }
  }
}

/** Linear-interpolation percentile (PostgreSQL's percentile_cont) of sorted values. */
export function percentile(sorted: number[], p: number): number | null {
  if (!sorted.length) return null;
  const pos = (sorted.length - 1) * p;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

/** Aligns `t` down to the bucket grid (multiples of the bucket since the epoch). */
export function bucketStart(t: number, bucketMs: number): number {
  return Math.floor(t / bucketMs) * bucketMs;
}

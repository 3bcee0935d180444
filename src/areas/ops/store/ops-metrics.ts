import type { Db } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';

export type SeriesValues = Record<string, number | null>;
export interface MetricPoint {
  bucket: string;
  metrics: SeriesValues;
  /** Minute buckets only, when asked: each replica's liveness and process figures at collection. */
  instances?: unknown[];
}
export type Granularity = 'minute' | 'hour' | 'day';

const TABLE: Record<Granularity, string> = { minute: 'ops_metrics_minute', hour: 'ops_metrics_hourly', day: 'ops_metrics_daily' };

// The bucket's usage, read through usage_logs_created (an index range on one bucket: the cost
// follows the bucket's rows, not the table's). Errors are status >= 500; 429 counted apart.
const USAGE_BUCKET = `
SELECT count(*) AS requests,
       count(*) FILTER (WHERE status_code >= 500) AS errors,
       count(*) FILTER (WHERE status_code = 429) AS rate_limited,
       coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms) AS p95,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_ms) AS p99
  FROM usage_logs WHERE created_at >= $1 AND created_at < $2`;

const ACCOUNTS = `
SELECT count(*) FILTER (WHERE status = 'active' AND schedulable AND (temp_unschedulable_until IS NULL OR temp_unschedulable_until <= clock_timestamp())) AS active,
       count(*) FILTER (WHERE status IN ('error', 'banned')) AS error,
       count(*) FILTER (WHERE status = 'expired') AS expired,
       count(*) FILTER (WHERE status = 'quota_exhausted' OR temp_unschedulable_until > clock_timestamp()) AS rate_limited,
       count(*) FILTER (WHERE status = 'disabled' OR NOT schedulable) AS paused,
       count(*) FILTER (WHERE refresh_failures > 0) AS refresh_failing,
       count(*) AS total
  FROM accounts`;

// The scheduler snapshot's change events not consumed yet (its full-rebuild requests aside), as its own gauge reads them.
const SCHEDULER_OUTBOX = `
SELECT coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0) AS lag
  FROM scheduler_outbox WHERE consumed_at IS NULL AND event_type <> 'full_rebuild'`;

// The newest good backup (verified, or completed where verification is off), as the doctor's backup_age reads it.
const NEWEST_BACKUP = `SELECT extract(epoch FROM clock_timestamp() - max(finished_at)) AS age FROM backups WHERE state IN ('verified', 'completed')`;

const PROXIES = `
SELECT count(*) FILTER (WHERE status = 'expired') AS expired,
       count(*) FILTER (WHERE status = 'active' AND expires_at IS NOT NULL AND expires_at < clock_timestamp() + interval '3 days') AS expiring
  FROM proxies`;

const OUTBOX = `
SELECT count(*) AS backlog, coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0) AS lag,
       count(*) FILTER (WHERE status = 'pending' AND rate_limited) AS rate_limited
  FROM notification_deliveries WHERE status IN ('pending', 'sending')`;

// Idempotent on the bucket: a second collection of the same bucket (late usage rows) replaces
// it, but only from a round at least as new as the one that wrote it.
const UPSERT = `
INSERT INTO ops_metrics_minute (bucket, bucket_seconds, metrics, instances, fencing_token)
VALUES ($1, $2, $3::jsonb, $4::jsonb, $5)
ON CONFLICT (bucket) DO UPDATE SET metrics = EXCLUDED.metrics, instances = EXCLUDED.instances, fencing_token = EXCLUDED.fencing_token, collected_at = clock_timestamp()
 WHERE ops_metrics_minute.fencing_token <= EXCLUDED.fencing_token`;

/** The ops plane's series: the collector's reads of the other areas' tables, and the bucket tables. */
export class OpsMetricsStore {
  constructor(private readonly db: Db) {}

  async usageBucket(from: Date, to: Date): Promise<SeriesValues> {
    const r = (await this.db.query<Record<string, unknown>>(USAGE_BUCKET, [from, to])).rows[0]!;
    const n = (v: unknown) => (v === null || v === undefined ? null : Math.round(num(v) * 1000) / 1000);
    return {
      request_count: num(r.requests),
      error_count: num(r.errors),
      rate_limit_count: num(r.rate_limited),
      input_tokens: num(r.input_tokens),
      output_tokens: num(r.output_tokens),
      p50_latency_ms: n(r.p50),
      p95_latency_ms: n(r.p95),
      p99_latency_ms: n(r.p99),
    };
  }

  async stateCounts(): Promise<SeriesValues> {
    const a = (await this.db.query<Record<string, unknown>>(ACCOUNTS)).rows[0]!;
    const p = (await this.db.query<Record<string, unknown>>(PROXIES)).rows[0]!;
    const o = (await this.db.query<Record<string, unknown>>(OUTBOX)).rows[0]!;
    return {
      accounts_active: num(a.active),
      accounts_error: num(a.error),
      accounts_expired: num(a.expired),
      accounts_rate_limited: num(a.rate_limited),
      accounts_paused: num(a.paused),
      accounts_refresh_failing: num(a.refresh_failing),
      accounts_refresh_failing_ratio: num(a.total) ? Math.round((num(a.refresh_failing) / num(a.total)) * 10_000) / 10_000 : 0,
      proxies_expired: num(p.expired),
      proxies_expiring: num(p.expiring),
      notification_backlog: num(o.backlog),
      notification_rate_limited: num(o.rate_limited),
      outbox_lag_seconds: Math.round(num(o.lag) * 10) / 10,
    };
  }

  /** Age of the oldest unconsumed scheduler outbox event (0 when none). */
  async schedulerOutboxLag(): Promise<SeriesValues> {
    const r = (await this.db.query<Record<string, unknown>>(SCHEDULER_OUTBOX)).rows[0]!;
    return { scheduler_outbox_lag_seconds: Math.round(num(r.lag) * 10) / 10 };
  }

  /** Seconds since the newest good backup finished; null when there is none. */
  async backupAge(): Promise<number | null> {
    const r = (await this.db.query<Record<string, unknown>>(NEWEST_BACKUP)).rows[0]!;
    return r.age === null || r.age === undefined ? null : Math.round(num(r.age));
  }

  async write(bucket: Date, bucketSeconds: number, metrics: SeriesValues, instances: unknown[], token: number): Promise<boolean> {
    return (await this.db.query(UPSERT, [bucket, bucketSeconds, JSON.stringify(metrics), JSON.stringify(instances), token])).rowCount === 1;
  }

  /** Buckets in [from, to), oldest first; `withInstances` adds the per-replica list (minute buckets only: rollups have none). */
  async range(granularity: Granularity, from: Date, to: Date, limit = 20_000, withInstances = false): Promise<MetricPoint[]> {
    const cols = withInstances && granularity === 'minute' ? 'bucket, metrics, instances' : 'bucket, metrics';
    const { rows } = await this.db.query<{ bucket: unknown; metrics: SeriesValues; instances?: unknown[] }>(
      `SELECT ${cols} FROM ${TABLE[granularity]} WHERE bucket >= $1 AND bucket < $2 ORDER BY bucket LIMIT $3`,
      [from, to, limit],
    );
    return rows.map((r) => ({ bucket: toDate(r.bucket)!.toISOString(), metrics: r.metrics, ...(r.instances ? { instances: r.instances } : {}) }));
  }

  /** The newest minute bucket, if any. */
  async latest(): Promise<{ bucket: Date; metrics: SeriesValues; instances: unknown[] } | null> {
    const { rows } = await this.db.query<{ bucket: unknown; metrics: SeriesValues; instances: unknown[] }>(`SELECT bucket, metrics, instances FROM ops_metrics_minute ORDER BY bucket DESC LIMIT 1`);
    return rows[0] ? { bucket: toDate(rows[0].bucket)!, metrics: rows[0].metrics, instances: rows[0].instances } : null;
  }

  /** Minute buckets whose start lies in (end − window, end]: what a rule's window covers. */
  async window(end: Date, windowMs: number): Promise<MetricPoint[]> {
    return this.range('minute', new Date(end.getTime() - windowMs + 1), new Date(end.getTime() + 1));
  }

  /** Rewrites the rollup buckets of [from, to) from the finer table (whole buckets, idempotent). */
  async rollup(into: 'hour' | 'day', points: Array<{ bucket: Date; metrics: SeriesValues; samples: number }>): Promise<number> {
    let n = 0;
    for (const p of points) {
      n += (
        await this.db.query(
          `INSERT INTO ${TABLE[into]} (bucket, metrics, samples) VALUES ($1, $2::jsonb, $3)
           ON CONFLICT (bucket) DO UPDATE SET metrics = EXCLUDED.metrics, samples = EXCLUDED.samples, updated_at = clock_timestamp()`,
          [p.bucket, JSON.stringify(p.metrics), p.samples],
        )
      ).rowCount;
    }
    return n;
  }

  async oldest(granularity: Granularity): Promise<Date | null> {
    return toDate((await this.db.query(`SELECT min(bucket) AS t FROM ${TABLE[granularity]}`)).rows[0]!.t);
  }
}

import type { Db } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';

const SUMS = `sum(requests) AS requests, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cache_tokens) AS cache_tokens,
  sum(cost) AS cost, sum(errors) AS errors, sum(latency_sum) AS latency_sum, sum(latency_count) AS latency_count`;
const DIMS = 'user_id, account_id, platform, model';

export const GROUPS = { none: null, user: 'user_id', account: 'account_id', platform: 'platform', model: 'model' } as const;
export type GroupBy = keyof typeof GROUPS;

export interface UsagePoint {
  t: string;
  key: string | null;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cache_tokens: number;
  /** Exact decimal text. */
  cost: string;
  errors: number;
  avg_latency_ms: number | null;
}

/**
 * Hourly and daily rollups of `usage_logs`. Both are rebuilt, never incremented: a range is
 * deleted and re-inserted from its source in one transaction, so re-aggregating an hour (the
 * lookback, a recompute) is idempotent and late events are counted the next time their hour is
 * rebuilt. Daily rows are built from hourly ones in the configured time zone (whole-hour offsets).
 */
/** Where dashboard_aggregation keeps its watermark: every hour before it is built into the rollups. */
export const AGGREGATION_WATERMARK = { job: 'dashboard_aggregation', key: 'watermark' } as const;
const READ_WATERMARK = `SELECT value FROM job_cursors WHERE job_name = $1 AND key = $2`;

export class Rollups {
  constructor(
    private readonly db: Db,
    private readonly timezone: string,
  ) {}

  /** The aggregation's watermark as committed (only fenced writes move it, only forward); null before the first round. */
  async coveredUntil(): Promise<Date | null> {
    const { rows } = await this.db.query<{ value: string }>(READ_WATERMARK, [AGGREGATION_WATERMARK.job, AGGREGATION_WATERMARK.key]);
    return rows[0] ? new Date(rows[0].value) : null;
  }

  /** Rebuilds hours in [from, to) from raw usage; returns the rollup rows written. */
  async rebuildHours(from: Date, to: Date): Promise<number> {
    return this.db.tx(async (q) => {
      await q.query(`DELETE FROM usage_hourly WHERE bucket >= $1 AND bucket < $2`, [from, to]);
      const { rowCount } = await q.query(
        `INSERT INTO usage_hourly (bucket, ${DIMS}, requests, input_tokens, output_tokens, cache_tokens, cost, errors, latency_sum, latency_count)
         SELECT date_trunc('hour', created_at, 'UTC'), user_id, coalesce(account_id, ''), platform, model, count(*), sum(input_tokens), sum(output_tokens),
                sum(cache_tokens), sum(cost), count(*) FILTER (WHERE status_code >= 400), coalesce(sum(latency_ms), 0), count(latency_ms)
         FROM usage_logs WHERE created_at >= $1 AND created_at < $2 GROUP BY 1, 2, 3, 4, 5`,
        [from, to],
      );
      return rowCount;
    });
  }

  /** Rebuilds the local days (in the configured zone) that overlap [from, to) from the hourly rollups. */
  async rebuildDays(from: Date, to: Date): Promise<number> {
    return this.db.tx(async (q) => {
      const { rows } = await q.query<{ d1: string; d2: string }>(
        `SELECT (($1::timestamptz) AT TIME ZONE $3)::date::text AS d1, ((($2::timestamptz) - interval '1 microsecond') AT TIME ZONE $3)::date::text AS d2`,
        [from, to, this.timezone],
      );
      const { d1, d2 } = rows[0]!;
      await q.query(`DELETE FROM usage_daily WHERE day BETWEEN $1::date AND $2::date`, [d1, d2]);
      const { rowCount } = await q.query(
        `INSERT INTO usage_daily (day, ${DIMS}, requests, input_tokens, output_tokens, cache_tokens, cost, errors, latency_sum, latency_count)
         SELECT (bucket AT TIME ZONE $3)::date, ${DIMS}, ${SUMS} FROM usage_hourly
         WHERE bucket >= ($1::date::timestamp AT TIME ZONE $3) AND bucket < (($2::date + 1)::timestamp AT TIME ZONE $3)
         GROUP BY 1, 2, 3, 4, 5`,
        [d1, d2, this.timezone],
      );
      return rowCount;
    });
  }

  /** Dashboard reads: rollups only, so the cost follows the number of buckets, not raw rows. */
  async query(f: { from: Date; to: Date; granularity: 'hour' | 'day'; groupBy: GroupBy; userId?: string; accountId?: string; platform?: string; model?: string }): Promise<UsagePoint[]> {
    const daily = f.granularity === 'day';
    const t = daily ? 'day' : 'bucket';
    const group = GROUPS[f.groupBy];
    const range = daily ? `day >= ($1 AT TIME ZONE $7)::date AND day <= (($2::timestamptz - interval '1 microsecond') AT TIME ZONE $7)::date` : `bucket >= $1 AND bucket < $2`;
    const params: unknown[] = [f.from, f.to, f.userId ?? null, f.accountId ?? null, f.platform ?? null, f.model ?? null];
    if (daily) params.push(this.timezone);
    const { rows } = await this.db.query(
      `SELECT ${daily ? 'day::text' : 'bucket'} AS t, ${group ?? 'NULL'} AS key, ${SUMS}
       FROM ${daily ? 'usage_daily' : 'usage_hourly'}
       WHERE ${range} AND ($3::text IS NULL OR user_id = $3) AND ($4::text IS NULL OR account_id = $4) AND ($5::text IS NULL OR platform = $5) AND ($6::text IS NULL OR model = $6)
       GROUP BY ${t}${group ? `, ${group}` : ''} ORDER BY ${t}${group ? `, ${group}` : ''}`,
      params,
    );
    return rows.map((r) => ({
      t: daily ? String(r.t) : toDate(r.t)!.toISOString(),
      key: (r.key as string | null) ?? null,
      requests: num(r.requests),
      input_tokens: num(r.input_tokens),
      output_tokens: num(r.output_tokens),
      cache_tokens: num(r.cache_tokens),
      cost: normalizeDecimal(String(r.cost)),
      errors: num(r.errors),
      avg_latency_ms: num(r.latency_count) > 0 ? Math.round(num(r.latency_sum) / num(r.latency_count)) : null,
    }));
  }

  /** Deletes rollup rows older than `before`, in short batches; returns rows deleted. */
  async deleteOlder(table: 'usage_hourly' | 'usage_daily', before: Date, batch: number): Promise<number> {
    const hourly = table === 'usage_hourly';
    const cutoff = hourly ? 'bucket < $1::timestamptz' : 'day < ($1::timestamptz AT TIME ZONE $3)::date';
    const params: unknown[] = hourly ? [before, batch] : [before, batch, this.timezone];
    let total = 0;
    for (;;) {
      const { rowCount } = await this.db.query(`DELETE FROM ${table} WHERE ctid IN (SELECT ctid FROM ${table} WHERE ${cutoff} LIMIT $2)`, params);
      total += rowCount;
      if (rowCount < batch) return total;
    }
  }
}

/** `12.3400000000` → `12.34`; `5.0000000000` → `5`. */
export function normalizeDecimal(s: string): string {
  return s.includes('.') ? s.replace(/0+$/, '').replace(/\.$/, '') : s;
}

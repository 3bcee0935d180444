import type { Db } from '../../../store/db.js';
import { num } from '../../../store/db.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/**
 * What rolls a target up: the job and its fenced watermark (`job_cursors`), and the size of the
 * buckets it folds. Rows at or after the watermark are in no rollup yet.
 */
export interface RollupCover {
  job: string;
  key: string;
  alignMs: number;
}

export interface CleanupTarget {
  table: string;
  column: string;
  where?: string;
  /** The target is folded into a coarser one: rows its rollup has not covered are never deleted. */
  coveredBy?: RollupCover;
}

/**
 * ops_cleanup's targets: a table and its time column. The list is data: a later area adds a row
 * here (and a default in `ops.retention_days`), not a code path.
 */
export const CLEANUP_TARGETS: Record<string, CleanupTarget> = {
  ops_metrics_minute: { table: 'ops_metrics_minute', column: 'bucket', coveredBy: { job: 'ops_aggregation', key: 'hourly_watermark', alignMs: HOUR } },
  ops_metrics_hourly: { table: 'ops_metrics_hourly', column: 'bucket', coveredBy: { job: 'ops_aggregation', key: 'daily_watermark', alignMs: DAY } },
  ops_metrics_daily: { table: 'ops_metrics_daily', column: 'bucket' },
  ops_alert_events: { table: 'ops_alert_events', column: 'fired_at', where: `state = 'resolved'` },
  notification_deliveries: { table: 'notification_deliveries', column: 'created_at', where: `status IN ('sent', 'failed', 'skipped')` },
  canary_runs: { table: 'canary_runs', column: 'at' },
  dead_letters: { table: 'dead_letters', column: 'created_at' },
  ops_counter_increments: { table: 'ops_counter_increments', column: 'at' },
};

function target(name: string): CleanupTarget {
  const t = CLEANUP_TARGETS[name];
  if (!t) throw new Error(`unknown cleanup target ${name}`);
  return t;
}

/** Retention overrides set through the API, and the batched deletes of ops_cleanup. */
export class OpsRetention {
  constructor(private readonly db: Db) {}

  async overrides(): Promise<Record<string, number>> {
    const { rows } = await this.db.query<{ target: string; days: unknown }>(`SELECT target, days FROM ops_retention`);
    return Object.fromEntries(rows.map((r) => [r.target, num(r.days)]));
  }

  async put(values: Record<string, number>): Promise<void> {
    await this.db.tx(async (q) => {
      for (const [t, d] of Object.entries(values)) {
        await q.query(`INSERT INTO ops_retention (target, days) VALUES ($1, $2) ON CONFLICT (target) DO UPDATE SET days = EXCLUDED.days, updated_at = clock_timestamp()`, [t, d]);
      }
    });
  }

  /** Where the rollup of `name` has got to: rows before it are in a rollup; null when it never ran. */
  async coveredUntil(cover: RollupCover): Promise<Date | null> {
    const { rows } = await this.db.query<{ value: unknown }>(`SELECT value FROM job_cursors WHERE job_name = $1 AND key = $2`, [cover.job, cover.key]);
    const v = rows[0]?.value;
    return typeof v === 'string' && Number.isFinite(Date.parse(v)) ? new Date(v) : null;
  }

  /** Whether `name` holds a row in [from, before) (from null: any row before `before`). */
  async anyBetween(name: string, from: Date | null, before: Date): Promise<boolean> {
    const t = target(name);
    const cond = [`($1::timestamptz IS NULL OR ${t.column} >= $1)`, `${t.column} < $2`, t.where].filter(Boolean).join(' AND ');
    return (await this.db.query(`SELECT 1 FROM ${t.table} WHERE ${cond} LIMIT 1`, [from, before])).rows.length > 0;
  }

  /** One short transaction: up to `limit` rows of `target` older than `before` (null: every row). */
  async deleteBatch(name: string, before: Date | null, limit: number): Promise<number> {
    const t = target(name);
    const cond = [`($1::timestamptz IS NULL OR ${t.column} < $1)`, t.where].filter(Boolean).join(' AND ');
    return (await this.db.query(`DELETE FROM ${t.table} WHERE ctid IN (SELECT ctid FROM ${t.table} WHERE ${cond} LIMIT $2)`, [before, limit])).rowCount;
  }
}

import type { Db } from '../../../store/db.js';
import { num } from '../../../store/db.js';

/**
 * ops_cleanup's targets: a table and its time column. The list is data: a later area adds a row
 * here (and a default in `ops.retention_days`), not a code path.
 */
export const CLEANUP_TARGETS: Record<string, { table: string; column: string; where?: string }> = {
  ops_metrics_minute: { table: 'ops_metrics_minute', column: 'bucket' },
  ops_metrics_hourly: { table: 'ops_metrics_hourly', column: 'bucket' },
  ops_metrics_daily: { table: 'ops_metrics_daily', column: 'bucket' },
  ops_alert_events: { table: 'ops_alert_events', column: 'fired_at', where: `state = 'resolved'` },
  notification_deliveries: { table: 'notification_deliveries', column: 'created_at', where: `status IN ('sent', 'failed', 'skipped')` },
  canary_runs: { table: 'canary_runs', column: 'at' },
};

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

  /** One short transaction: up to `limit` rows of `target` older than `before` (null: every row). */
  async deleteBatch(target: string, before: Date | null, limit: number): Promise<number> {
    const t = CLEANUP_TARGETS[target];
    if (!t) throw new Error(`unknown cleanup target ${target}`);
    const cond = [`($1::timestamptz IS NULL OR ${t.column} < $1)`, t.where].filter(Boolean).join(' AND ');
    return (await this.db.query(`DELETE FROM ${t.table} WHERE ctid IN (SELECT ctid FROM ${t.table} WHERE ${cond} LIMIT $2)`, [before, limit])).rowCount;
  }
}

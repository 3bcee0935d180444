import type { Db } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';

export interface QuotaRow {
  user_id: string;
  platform: string;
  used: number;
  epoch: number;
}

/**
 * `platform_quota_usage`: absolute per-user, per-platform usage, written by the flusher. The upsert
 * only moves forward: a newer epoch (a reset) always wins, and within an epoch the count never
 * goes down, so two flushers racing, or a snapshot read before a reset, cannot roll it back.
 */
export class QuotaUsage {
  constructor(private readonly db: Db) {}

  /** Returns how many rows were written (the rest were older than what is stored). */
  async upsert(rows: QuotaRow[]): Promise<number> {
    if (!rows.length) return 0;
    const { rowCount } = await this.db.query(
      `INSERT INTO platform_quota_usage (user_id, platform, used, epoch)
       SELECT user_id, platform, used, epoch FROM jsonb_to_recordset($1::jsonb) AS x(user_id text, platform text, used bigint, epoch bigint)
       ON CONFLICT (user_id, platform) DO UPDATE SET used = EXCLUDED.used, epoch = EXCLUDED.epoch, updated_at = clock_timestamp()
       WHERE platform_quota_usage.epoch < EXCLUDED.epoch
          OR (platform_quota_usage.epoch = EXCLUDED.epoch AND platform_quota_usage.used < EXCLUDED.used)`,
      [JSON.stringify(rows)],
    );
    return rowCount;
  }

  async get(userId: string, platform: string): Promise<QuotaRow | null> {
    const { rows } = await this.db.query(`SELECT user_id, platform, used, epoch FROM platform_quota_usage WHERE user_id = $1 AND platform = $2`, [userId, platform]);
    return rows[0] ? { user_id: String(rows[0].user_id), platform: String(rows[0].platform), used: num(rows[0].used), epoch: num(rows[0].epoch) } : null;
  }

  async list(userId: string): Promise<Array<QuotaRow & { updated_at: string }>> {
    const { rows } = await this.db.query(`SELECT user_id, platform, used, epoch, updated_at FROM platform_quota_usage WHERE user_id = $1 ORDER BY platform`, [userId]);
    return rows.map((r) => ({ user_id: String(r.user_id), platform: String(r.platform), used: num(r.used), epoch: num(r.epoch), updated_at: toDate(r.updated_at)!.toISOString() }));
  }
}

import type { Db } from '../../../store/db.js';
import { iso, num } from '../../../store/db.js';
import { RangeTaskTable, type RangeTaskStatus } from './range-tasks.js';

export interface CleanupTask {
  id: number;
  user_id: string | null;
  account_id: string | null;
  range_start: string;
  range_end: string;
  status: RangeTaskStatus;
  claimed_by: string | null;
  heartbeat_at: string | null;
  deleted_rows: number;
  error: string | null;
  created_at: string;
  finished_at: string | null;
}

function toTask(r: Record<string, unknown>): CleanupTask {
  return {
    id: num(r.id),
    user_id: (r.user_id as string) ?? null,
    account_id: (r.account_id as string) ?? null,
    range_start: iso(r.range_start)!,
    range_end: iso(r.range_end)!,
    status: r.status as CleanupTask['status'],
    claimed_by: (r.claimed_by as string) ?? null,
    heartbeat_at: iso(r.heartbeat_at),
    deleted_rows: num(r.deleted_rows),
    error: (r.error as string) ?? null,
    created_at: iso(r.created_at)!,
    finished_at: iso(r.finished_at),
  };
}

/** Admin-requested range deletions of raw usage (see RangeTaskTable for the claim rules). */
export class CleanupTasks extends RangeTaskTable<CleanupTask> {
  constructor(db: Db) {
    super(db, 'usage_cleanup_tasks', toTask);
  }

  async create(t: { userId: string | null; accountId: string | null; from: Date; to: Date }): Promise<CleanupTask> {
    const { rows } = await this.db.query(`INSERT INTO usage_cleanup_tasks (user_id, account_id, range_start, range_end) VALUES ($1, $2, $3, $4) RETURNING *`, [t.userId, t.accountId, t.from, t.to]);
    return toTask(rows[0]!);
  }

  /** Records progress; false when the task was cancelled or claimed by someone else meanwhile. */
  async heartbeat(id: number, owner: string, deleted: number): Promise<boolean> {
    const { rowCount } = await this.db.query(`UPDATE usage_cleanup_tasks SET heartbeat_at = clock_timestamp(), deleted_rows = $3 WHERE ${this.held}`, [id, owner, deleted]);
    return rowCount === 1;
  }

  async finish(id: number, owner: string, deleted: number): Promise<void> {
    await this.db.query(`UPDATE usage_cleanup_tasks SET status = 'done', deleted_rows = $3, finished_at = clock_timestamp() WHERE ${this.held}`, [id, owner, deleted]);
  }
}

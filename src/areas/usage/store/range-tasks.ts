import type { Db } from '../../../store/db.js';

export type RangeTaskStatus = 'pending' | 'running' | 'done' | 'cancelled' | 'failed';

/**
 * Admin-requested work over a time range, as claimable rows (`usage_cleanup_tasks`,
 * `usage_recompute_tasks`): claimed with SKIP LOCKED, kept alive by a heartbeat per step,
 * reclaimed when the owner's heartbeat is older than the task timeout, released at shutdown so
 * another replica resumes at once, cancelled by setting the status (the worker sees it at its
 * next heartbeat). The table name is one of this module's constants, never input.
 */
export class RangeTaskTable<T> {
  constructor(
    protected readonly db: Db,
    private readonly table: 'usage_cleanup_tasks' | 'usage_recompute_tasks',
    protected readonly toTask: (r: Record<string, unknown>) => T,
  ) {}

  async get(id: number): Promise<T | null> {
    const { rows } = await this.db.query(`SELECT * FROM ${this.table} WHERE id = $1`, [id]);
    return rows[0] ? this.toTask(rows[0]) : null;
  }

  async list(limit = 100): Promise<T[]> {
    const { rows } = await this.db.query(`SELECT * FROM ${this.table} ORDER BY id DESC LIMIT $1`, [limit]);
    return rows.map(this.toTask);
  }

  /** Cancels a pending or running task; false when it had already ended. */
  async cancel(id: number): Promise<boolean> {
    const { rowCount } = await this.db.query(`UPDATE ${this.table} SET status = 'cancelled', finished_at = clock_timestamp() WHERE id = $1 AND status IN ('pending', 'running')`, [id]);
    return rowCount === 1;
  }

  /** The oldest pending task, or a running one whose owner stopped beating. */
  async claim(owner: string, timeoutMs: number): Promise<T | null> {
    const { rows } = await this.db.query(
      `UPDATE ${this.table} SET status = 'running', claimed_by = $1, heartbeat_at = clock_timestamp()
       WHERE id = (SELECT id FROM ${this.table}
                   WHERE status = 'pending' OR (status = 'running' AND heartbeat_at < clock_timestamp() - $2 * interval '1 millisecond')
                   ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
       RETURNING *`,
      [owner, timeoutMs],
    );
    return rows[0] ? this.toTask(rows[0]) : null;
  }

  /** Hands a running task back (shutdown, round timeout): the next claimer resumes where it stopped. */
  async release(id: number, owner: string): Promise<void> {
    await this.db.query(`UPDATE ${this.table} SET status = 'pending', claimed_by = NULL WHERE id = $1 AND claimed_by = $2 AND status = 'running'`, [id, owner]);
  }

  async fail(id: number, owner: string, error: string): Promise<void> {
    await this.db.query(`UPDATE ${this.table} SET status = 'failed', error = $3, finished_at = clock_timestamp() WHERE id = $1 AND claimed_by = $2 AND status = 'running'`, [id, owner, error]);
  }
}

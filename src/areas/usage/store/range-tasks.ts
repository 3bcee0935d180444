import type { Db } from '../../../store/db.js';
import { claimDue, heldBy, msInterval, type LeaseTable } from '../../../store/claim-queue.js';

export type RangeTaskStatus = 'pending' | 'running' | 'done' | 'cancelled' | 'failed';

/**
 * Admin-requested work over a time range, as claimable rows (`usage_cleanup_tasks`,
 * `usage_recompute_tasks`): claimed through the claim queue (`claim-queue.ts`), kept alive by a heartbeat per step,
 * reclaimed when the owner's heartbeat is older than the task timeout, released at shutdown so
 * another replica resumes at once, cancelled by setting the status (the worker sees it at its
 * next heartbeat). The table name is one of this module's constants, never input.
 */
export class RangeTaskTable<T> {
  /**
   * The lease of a range task (`claim-queue.ts`) is its last heartbeat: `heartbeat_at` plus the
   * task timeout is the deadline, so the claim sets it to now (lease 0) and the free condition
   * reads the timeout ($2). A pending task carries no lease.
   */
  private readonly lease: LeaseTable;
  private readonly claimSql: string;
  /**
   * Every write of a claimed task's worker ($1 the task, $2 its owner): it matches only while
   * the owner still holds the task, so a worker whose task was cancelled or taken over changes nothing.
   */
  protected readonly held: string;

  constructor(
    protected readonly db: Db,
    private readonly table: 'usage_cleanup_tasks' | 'usage_recompute_tasks',
    protected readonly toTask: (r: Record<string, unknown>) => T,
  ) {
    this.lease = { table, key: 'id', owner: 'claimed_by', until: 'heartbeat_at' };
    this.claimSql = claimDue(this.lease, {
      due: 'true',
      free: `(status = 'pending' OR (status = 'running' AND heartbeat_at < clock_timestamp() - ${msInterval('$2')}))`,
      order: 'created_at',
      limit: '1',
      owner: '$1',
      leaseMs: '0',
      set: [`status = 'running'`],
      returning: 't.*',
    });
    this.held = `id = $1 AND ${heldBy(this.lease, { owner: '$2' })} AND status = 'running'`;
  }

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
    const { rows } = await this.db.query(this.claimSql, [owner, timeoutMs]);
    return rows[0] ? this.toTask(rows[0]) : null;
  }

  /** Hands a running task back (shutdown, round timeout): the next claimer resumes where it stopped. */
  async release(id: number, owner: string): Promise<void> {
    await this.db.query(`UPDATE ${this.table} SET status = 'pending', claimed_by = NULL WHERE ${this.held}`, [id, owner]);
  }

  async fail(id: number, owner: string, error: string): Promise<void> {
    await this.db.query(`UPDATE ${this.table} SET status = 'failed', error = $3, finished_at = clock_timestamp() WHERE ${this.held}`, [id, owner, error]);
  }
}

import type { Db } from '../../../store/db.js';
import { num } from '../../../store/db.js';

/** A claimed queue row: only the holder of this fence may move the batch on. */
export interface BatchLease {
  batchId: number;
  fence: number;
  owner: string;
}

/** The SQL condition "this lease still holds": `$l1` batch id, `$l2` fence, `$l3` owner. */
export const LEASE_HELD = (b: string, f: string, o: string) => `EXISTS (SELECT 1 FROM image_batch_queue WHERE batch_id = ${b} AND fence = ${f} AND locked_by = ${o} AND status = 'active')`;

/**
 * The batch work queue in PostgreSQL (table `image_batch_queue`, one row per live batch):
 * - ready → active by `claim` (FOR UPDATE SKIP LOCKED, so replicas never take the same row;
 *   the fence goes up by one on every claim);
 * - active → ready/delayed by `requeue` (owner and fence checked);
 * - active with an expired lease → ready by `recoverStale` (a worker died);
 * - delayed → ready by `moveDue` once its time has come.
 * Times are the database clock, so replicas with skewed clocks agree.
 */
export class ImageQueue {
  constructor(private readonly db: Db) {}

  async claim(owner: string, limit: number, leaseMs: number): Promise<BatchLease[]> {
    if (limit <= 0) return [];
    const { rows } = await this.db.query(
      `WITH c AS (SELECT batch_id FROM image_batch_queue WHERE status = 'ready' ORDER BY run_at, batch_id LIMIT $2 FOR UPDATE SKIP LOCKED)
       UPDATE image_batch_queue q SET status = 'active', locked_by = $1, locked_until = clock_timestamp() + $3 * interval '1 millisecond', fence = q.fence + 1, attempts = q.attempts + 1
       FROM c WHERE q.batch_id = c.batch_id RETURNING q.batch_id, q.fence`,
      [owner, limit, leaseMs],
    );
    return rows.map((r) => ({ batchId: num(r.batch_id), fence: num(r.fence), owner }));
  }

  /** Extends the lease; false when it was lost (recovered as stale, or the batch ended). */
  async heartbeat(l: BatchLease, leaseMs: number): Promise<boolean> {
    const { rowCount } = await this.db.query(
      `UPDATE image_batch_queue SET locked_until = clock_timestamp() + $4 * interval '1 millisecond' WHERE batch_id = $1 AND fence = $2 AND locked_by = $3 AND status = 'active'`,
      [l.batchId, l.fence, l.owner, leaseMs],
    );
    return rowCount === 1;
  }

  /** Hands the batch back: ready now (delay 0) or delayed until now + delay. */
  async requeue(l: BatchLease, delayMs: number): Promise<boolean> {
    const { rowCount } = await this.db.query(
      `UPDATE image_batch_queue SET status = CASE WHEN $4 > 0 THEN 'delayed' ELSE 'ready' END, run_at = clock_timestamp() + $4 * interval '1 millisecond', locked_by = NULL, locked_until = NULL
       WHERE batch_id = $1 AND fence = $2 AND locked_by = $3 AND status = 'active'`,
      [l.batchId, l.fence, l.owner, Math.max(0, Math.round(delayMs))],
    );
    return rowCount === 1;
  }

  /** Active rows whose lease ran out (their worker died or stalled) go back to ready. */
  async recoverStale(): Promise<number> {
    return (await this.db.query(`UPDATE image_batch_queue SET status = 'ready', locked_by = NULL, locked_until = NULL WHERE status = 'active' AND locked_until < clock_timestamp()`)).rowCount;
  }

  /** The delayed mover: delayed rows whose time has come become ready. */
  async moveDue(): Promise<number> {
    return (await this.db.query(`UPDATE image_batch_queue SET status = 'ready' WHERE status = 'delayed' AND run_at <= clock_timestamp()`)).rowCount;
  }

  /** A delayed batch made ready now (a cancel should not wait for the next poll). */
  async wake(batchId: number): Promise<void> {
    await this.db.query(`UPDATE image_batch_queue SET status = 'ready', run_at = clock_timestamp() WHERE batch_id = $1 AND status = 'delayed'`, [batchId]);
  }

  async counts(): Promise<{ ready: number; delayed: number; active: number }> {
    const { rows } = await this.db.query(`SELECT status, count(*) AS n FROM image_batch_queue GROUP BY status`);
    const out = { ready: 0, delayed: 0, active: 0 };
    for (const r of rows) out[r.status as keyof typeof out] = num(r.n);
    return out;
  }
}

import type { Db } from '../../../store/db.js';
import { num } from '../../../store/db.js';
import { settleHold } from '../../billing/index.js';
import { LEASE_HELD, type BatchLease } from './image-queue.js';
import { recordEvent, toBatch, type BatchState, type ImageBatch } from './image-batches.js';

/** Columns a transition may set besides the state. */
export interface BatchPatch {
  reason?: string | null;
  input_file_id?: string | null;
  create_sent_at?: 'now' | null;
  provider_batch_id?: string | null;
  provider_status?: string | null;
  output_file_id?: string | null;
  error_file_id?: string | null;
  succeeded?: number;
  failed?: number;
  errors?: number;
  cancel_requested?: boolean;
  inputs_deleted_at?: 'now';
}

export type Settlement = { step: 'capture'; cost: number } | { step: 'release' };

/**
 * Every change of a batch is conditional on the state it expects (and, for a worker, on its
 * queue lease: owner and fence), so a stale worker, a replay or a racing cancel changes nothing.
 * A state change and its event row are one transaction; an ending also settles the money and
 * removes the queue row in that same transaction.
 */
export class BatchTransitions {
  constructor(private readonly db: Db) {}

  /** `from` → `to` (or the same state, for a patch only). Null when the batch was not in `from` or the lease is gone. */
  async move(lease: BatchLease | null, id: number, from: BatchState | readonly BatchState[], to: BatchState, patch: BatchPatch = {}, reason: string | null = null): Promise<ImageBatch | null> {
    return this.db.tx(async (q) => {
      const params: unknown[] = [id, Array.isArray(from) ? from : [from], to];
      const sets = ['state = $3', 'updated_at = clock_timestamp()'];
      for (const [k, v] of Object.entries(patch)) {
        if (v === 'now') sets.push(`${k} = clock_timestamp()`);
        else {
          params.push(v);
          sets.push(`${k} = $${params.length}`);
        }
      }
      let guard = '';
      if (lease) {
        params.push(lease.fence, lease.owner);
        guard = ` AND ${LEASE_HELD('$1', `$${params.length - 1}`, `$${params.length}`)}`;
      }
      const { rows } = await q.query(
        `UPDATE image_batches b SET ${sets.join(', ')} FROM (SELECT state AS old FROM image_batches WHERE id = $1 FOR UPDATE) o WHERE b.id = $1 AND b.state = ANY($2::text[])${guard} RETURNING b.*, o.old`,
        params,
      );
      if (!rows[0]) return null;
      const old = rows[0].old as BatchState;
      if (old !== to) await recordEvent(q, id, old, to, reason ?? patch.reason ?? null);
      return toBatch(rows[0]);
    });
  }

  /**
   * Ends the batch and settles its hold, once: capture (cost ≤ hold, the rest back to the
   * balance) or release (the whole hold back). The dedup row is claimed first; if it exists
   * the whole transaction is a no-op. Null when nothing changed.
   */
  async finish(
    lease: BatchLease | null,
    id: number,
    from: readonly BatchState[],
    to: 'completed' | 'failed' | 'cancelled',
    money: Settlement,
    reason: string | null,
    patch: { succeeded?: number; failed?: number } = {},
  ): Promise<ImageBatch | null> {
    return this.db
      .tx(async (q) => {
        const cost = money.step === 'capture' ? money.cost : 0;
        const current = await q.query(`SELECT hold_amount FROM image_batches WHERE id = $1 FOR UPDATE`, [id]);
        if (!current.rows[0]) return null;
        const hold = num(current.rows[0].hold_amount);
        // Cost is checked against the hold before anything moves (and by CHECK captured <= hold_amount).
        if (!Number.isSafeInteger(cost) || cost < 0 || cost > hold) throw new Error(`batch ${id}: capture ${cost} is outside 0..${hold}`);
        const params: unknown[] = [id, from, to, reason, cost, patch.succeeded ?? null, patch.failed ?? null];
        const guard = lease ? ` AND ${LEASE_HELD('$1', '$8', '$9')}` : '';
        if (lease) params.push(lease.fence, lease.owner);
        const { rows } = await q.query(
          `UPDATE image_batches b SET state = $3, reason = $4, captured = $5, succeeded = coalesce($6, b.succeeded), failed = coalesce($7, b.failed), ended_at = clock_timestamp(), updated_at = clock_timestamp()
           FROM (SELECT state AS old FROM image_batches WHERE id = $1 FOR UPDATE) o
           WHERE b.id = $1 AND b.state = ANY($2::text[])${guard} RETURNING b.*, o.old`,
          params,
        );
        if (!rows[0]) return null;
        const claimed = await q.query(`INSERT INTO image_batch_money (batch_id, step, amount, refunded) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1`, [
          id,
          money.step,
          money.step === 'capture' ? cost : hold,
          hold - cost,
        ]);
        if (claimed.rows.length !== 1) throw new AlreadySettled();
        // Billing's settle (a release when cost is 0), in this transaction with the ledger row above.
        await settleHold(q, num(rows[0].user_id), hold, cost);
        await q.query(`DELETE FROM image_batch_queue WHERE batch_id = $1`, [id]);
        await recordEvent(q, id, rows[0].old as BatchState, to, reason);
        return toBatch(rows[0]);
      })
      .catch((err: unknown) => {
        if (err instanceof AlreadySettled) return null;
        throw err;
      });
  }

  /**
   * Batches stuck before the provider knew them (created/uploading, no create ever sent,
   * untouched for `staleMs`) that the queue will not move on: no queue row, or a row claimed
   * `maxClaims` times without leaving these states (a batch that crashes its worker every time).
   * A batch merely waiting its turn in the queue is not stuck. Failed and released; returns their ids.
   */
  async failStuck(staleMs: number, maxClaims: number, limit: number): Promise<number[]> {
    const { rows } = await this.db.query(
      `SELECT b.id FROM image_batches b LEFT JOIN image_batch_queue q ON q.batch_id = b.id
       WHERE b.state IN ('created', 'uploading') AND b.provider_batch_id IS NULL AND b.create_sent_at IS NULL
         AND b.updated_at < clock_timestamp() - $1 * interval '1 millisecond'
         AND (q.batch_id IS NULL OR (q.attempts >= $3 AND (q.status <> 'active' OR q.locked_until < clock_timestamp())))
       ORDER BY b.updated_at LIMIT $2`,
      [staleMs, limit, maxClaims],
    );
    const done: number[] = [];
    for (const r of rows) {
      const b = await this.finish(null, num(r.id), ['created', 'uploading'], 'failed', { step: 'release' }, 'stuck before submission; hold released by recovery');
      if (b) done.push(b.id);
    }
    return done;
  }

  /** Ended batches past retention: their inputs (after `inputMs`) and outputs (after `outputMs`). */
  async retentionDue(inputMs: number, outputMs: number, limit: number): Promise<{ inputs: ImageBatch[]; outputs: ImageBatch[] }> {
    const inputs = await this.db.query(
      `SELECT * FROM image_batches WHERE ended_at IS NOT NULL AND inputs_deleted_at IS NULL AND ended_at < clock_timestamp() - $1 * interval '1 millisecond' ORDER BY ended_at LIMIT $2`,
      [inputMs, limit],
    );
    const outputs = await this.db.query(
      `SELECT * FROM image_batches WHERE state IN ('completed', 'failed', 'cancelled') AND ended_at < clock_timestamp() - $1 * interval '1 millisecond' ORDER BY ended_at LIMIT $2`,
      [outputMs, limit],
    );
    return { inputs: inputs.rows.map(toBatch), outputs: outputs.rows.map(toBatch) };
  }

  /**
   * Claims the deletion of a batch's input: one replica's conditional write wins, so the input
   * is deleted once however many replicas run the retention round. The claim commits before the
   * delete; a delete that then fails leaves an object no batch references, for the orphan sweep.
   */
  async claimInputDeletion(id: number): Promise<boolean> {
    const { rows } = await this.db.query(`UPDATE image_batches SET inputs_deleted_at = clock_timestamp(), updated_at = clock_timestamp() WHERE id = $1 AND inputs_deleted_at IS NULL RETURNING id`, [
      id,
    ]);
    return rows.length === 1;
  }

  async saveResults(lease: BatchLease, id: number, results: Array<{ idx: number; status: 'succeeded' | 'failed'; images: number; objectKeys: string[]; error: string | null }>): Promise<boolean> {
    return this.db.tx(async (q) => {
      const held = await q.query(`SELECT 1 FROM image_batches WHERE id = $1 AND state = 'indexing' AND ${LEASE_HELD('$1', '$2', '$3')} FOR UPDATE`, [id, lease.fence, lease.owner]);
      if (held.rows.length !== 1) return false; // rows, not rowCount: PGlite counts a SELECT … FOR UPDATE as 0 affected rows
      await q.query(`DELETE FROM image_batch_results WHERE batch_id = $1`, [id]);
      for (const r of results) {
        await q.query(`INSERT INTO image_batch_results (batch_id, idx, status, images, object_keys, error) VALUES ($1, $2, $3, $4, $5::jsonb, $6)`, [
          id,
          r.idx,
          r.status,
          r.images,
          JSON.stringify(r.objectKeys),
          r.error,
        ]);
      }
      return true;
    });
  }
}

class AlreadySettled extends Error {}

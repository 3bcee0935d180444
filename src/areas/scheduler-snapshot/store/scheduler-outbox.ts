import type { Db } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';
import { claimDue, heldBy, leaseFree, lockedPick, renewLease, type LeaseTable } from '../../../store/claim-queue.js';

export interface OutboxEvent {
  id: number;
  type: string;
  payload: Record<string, unknown>;
  createdAt: Date;
  attempts: number;
}

export interface OutboxStats {
  /** Unconsumed change events (rebuild requests not counted). */
  backlog: number;
  /** Age of the oldest unconsumed change event, 0 when there is none (database clock). */
  lagSeconds: number;
  /** A full-rebuild request no live claim holds (one replica should claim it). */
  rebuildPending?: boolean;
  /** Consumed rows not deleted yet. */
  consumed?: number;
}

export interface SnapshotState {
  watermark: number;
  watermarkAt: Date | null;
  lastRebuildAt: Date | null;
  lastRebuildReason: string | null;
  lastRebuildEpoch: number | null;
  dbNow: Date;
}

export const FULL_REBUILD = 'full_rebuild';

const toEvent = (r: Record<string, unknown>): OutboxEvent => ({
  id: num(r.id),
  type: String(r.event_type),
  payload: (typeof r.payload === 'string' ? JSON.parse(r.payload) : r.payload) as Record<string, unknown>,
  createdAt: toDate(r.created_at)!,
  attempts: num(r.attempts),
});

/**
 * A claim marks rows with a token and a deadline (`claim-queue.ts`); its locked pick lets replicas
 * claim disjoint batches at once, and the deadline hands rows of a dead replica to the next
 * claimer. No liveness key here: the consumer's claims are short (a batch), and a fresh token per
 * claim is the fence. $1 token, $2 lease ms, $3 limit, $4/$5 the rebuild filter.
 */
const OUTBOX: LeaseTable = { table: 'scheduler_outbox', key: 'id', owner: 'claim_token', until: 'claimed_until' };
const CLAIM = claimDue(OUTBOX, {
  due: 'consumed_at IS NULL AND (event_type = $4) = $5',
  order: 'id',
  limit: '$3',
  owner: '$1',
  leaseMs: '$2',
  set: ['attempts = t.attempts + 1'],
  returning: 't.id, t.event_type, t.payload, t.created_at, t.attempts',
});
const PENDING = 'consumed_at IS NULL';
/** Consumed rows, oldest first, `$1` per statement; rows a claim or another delete holds are passed over. */
const DELETE_CONSUMED = `DELETE FROM scheduler_outbox WHERE id IN (${lockedPick({ select: 'id', from: 'scheduler_outbox', where: 'consumed_at IS NOT NULL', order: 'id', limit: '$1' })})`;

/**
 * The `scheduler_outbox` table as a queue: claim, acknowledge (watermark and consumed mark in one
 * transaction), release with a backoff, and delete consumed rows in small batches.
 */
export class SchedulerOutbox {
  constructor(private readonly db: Db) {}

  /** Up to `limit` change events no other live claim holds. */
  async claim(token: string, leaseMs: number, limit: number): Promise<OutboxEvent[]> {
    const { rows } = await this.db.query(CLAIM, [token, leaseMs, limit, FULL_REBUILD, false]);
    return rows.map(toEvent).sort((a, b) => a.id - b.id);
  }

  /** The pending full-rebuild request, if no live claim holds it. */
  async claimRebuild(token: string, leaseMs: number): Promise<OutboxEvent | null> {
    const { rows } = await this.db.query(CLAIM, [token, leaseMs, 1, FULL_REBUILD, true]);
    return rows[0] ? toEvent(rows[0]) : null;
  }

  /** Keeps a long claim (a rebuild) alive; false when it was lost to another claimer. */
  async extend(id: number, token: string, leaseMs: number): Promise<boolean> {
    const { rowCount } = await this.db.query(renewLease(OUTBOX, { key: '$1', owner: '$2', leaseMs: '$3', and: PENDING }), [id, token, leaseMs]);
    return rowCount === 1;
  }

  /**
   * After the batch is applied: the rows are marked consumed and the watermark moves, together.
   * Rows whose claim was lost meanwhile are not marked (their new claimer applies them again:
   * handlers are idempotent). Returns how many rows were marked.
   */
  async ack(ids: number[], token: string, signal?: AbortSignal): Promise<number> {
    if (!ids.length) return 0;
    return this.db.tx(async (q) => {
      signal?.throwIfAborted();
      const { rowCount } = await q.query(`UPDATE scheduler_outbox SET consumed_at = clock_timestamp() WHERE id = ANY($1::bigint[]) AND ${heldBy(OUTBOX, { owner: '$2' })} AND ${PENDING}`, [
        ids,
        token,
      ]);
      await q.query(`UPDATE scheduler_snapshot_state SET watermark = GREATEST(watermark, $1), watermark_at = clock_timestamp()`, [Math.max(...ids)]);
      return rowCount;
    });
  }

  /** A batch that failed: claimable again after `delayMs` (the rows keep their claim, so dedup still sees them as taken). */
  async release(ids: number[], token: string, delayMs: number): Promise<void> {
    if (!ids.length) return;
    await this.db.query(renewLease(OUTBOX, { keyIn: '$1::bigint[]', owner: '$2', leaseMs: '$3', and: PENDING }), [ids, token, delayMs]);
  }

  /** Deletes consumed rows, `batch` per statement so no statement holds many row locks; returns rows deleted. */
  async deleteConsumed(batch: number, maxBatches: number): Promise<number> {
    let total = 0;
    for (let i = 0; i < maxBatches; i++) {
      const { rowCount } = await this.db.query(DELETE_CONSUMED, [batch]);
      total += rowCount;
      if (rowCount < batch) break;
    }
    return total;
  }

  /** One read says whether a poll has anything to do: change events, a claimable rebuild request, consumed rows to delete. */
  async stats(): Promise<OutboxStats> {
    const { rows } = await this.db.query(
      `SELECT count(*) FILTER (WHERE ${PENDING} AND event_type <> $1) AS backlog,
              COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(created_at) FILTER (WHERE ${PENDING} AND event_type <> $1)), 0) AS lag,
              bool_or(${PENDING} AND event_type = $1 AND ${leaseFree(OUTBOX)}) AS rebuild_pending,
              count(*) FILTER (WHERE consumed_at IS NOT NULL) AS consumed
       FROM scheduler_outbox`,
      [FULL_REBUILD],
    );
    const r = rows[0]!;
    return { backlog: num(r.backlog), lagSeconds: Math.max(0, num(r.lag)), rebuildPending: r.rebuild_pending === true, consumed: num(r.consumed) };
  }

  /**
   * Requests one full rebuild, coalesced cluster-wide: nothing is written while a request is
   * pending or being carried out (unless `evenIfRunning`: Redis lost what a running rebuild wrote).
   * True when this call recorded the request.
   */
  async requestRebuild(reason: string, evenIfRunning = false): Promise<boolean> {
    const { rowCount } = await this.db.query(
      `INSERT INTO scheduler_outbox (event_type, payload, dedup_key)
       SELECT $1, jsonb_build_object('reason', $2::text), $1
       WHERE $3 OR NOT EXISTS (SELECT 1 FROM scheduler_outbox WHERE event_type = $1 AND consumed_at IS NULL)
       ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND claim_token IS NULL AND consumed_at IS NULL DO NOTHING`,
      [FULL_REBUILD, reason, evenIfRunning],
    );
    return rowCount === 1;
  }

  async state(): Promise<SnapshotState> {
    const { rows } = await this.db.query(`SELECT *, clock_timestamp() AS db_now FROM scheduler_snapshot_state`);
    const r = rows[0]!;
    return {
      watermark: num(r.watermark),
      watermarkAt: toDate(r.watermark_at),
      lastRebuildAt: toDate(r.last_rebuild_at),
      lastRebuildReason: (r.last_rebuild_reason as string) ?? null,
      lastRebuildEpoch: r.last_rebuild_epoch === null ? null : num(r.last_rebuild_epoch),
      dbNow: toDate(r.db_now)!,
    };
  }

  /** A finished rebuild: its request is consumed and the time recorded, together. */
  async finishRebuild(id: number, token: string, reason: string, epoch: number): Promise<void> {
    await this.db.tx(async (q) => {
      await q.query(`UPDATE scheduler_outbox SET consumed_at = clock_timestamp() WHERE id = $1 AND ${heldBy(OUTBOX, { owner: '$2' })}`, [id, token]);
      await q.query(`UPDATE scheduler_snapshot_state SET last_rebuild_at = clock_timestamp(), last_rebuild_reason = $1, last_rebuild_epoch = $2`, [reason, epoch]);
    });
  }
}

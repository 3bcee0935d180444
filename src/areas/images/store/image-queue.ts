import type { Db } from '../../../store/db.js';
import { num } from '../../../store/db.js';
import { claimDue, heldBy, reapExpired, releaseLease, renewLease, type LeaseTable } from '../../../store/claim-queue.js';

/** A claimed queue row: only the holder of this fence may move the batch on. */
export interface BatchLease {
  batchId: number;
  fence: number;
  owner: string;
}

/** The SQL condition "this lease still holds": `$l1` batch id, `$l2` fence, `$l3` owner. */
export const LEASE_HELD = (b: string, f: string, o: string) => `EXISTS (SELECT 1 FROM image_batch_queue WHERE batch_id = ${b} AND ${heldBy(QUEUE, { fence: f, owner: o })} AND ${ACTIVE})`;

/** The queue row's lease (`claim-queue.ts`): `locked_alive_key` is the claimer's liveness key (migration 027). */
const QUEUE: LeaseTable = { table: 'image_batch_queue', key: 'batch_id', owner: 'locked_by', until: 'locked_until', fence: 'fence', aliveKey: 'locked_alive_key' };
const ACTIVE = `status = 'active'`;
// ready → active: a ready row carries no lease, so the status alone says it is free.
const CLAIM = claimDue(QUEUE, {
  due: `status = 'ready'`,
  free: 'true',
  order: 'run_at, batch_id',
  limit: '$2',
  owner: '$1',
  leaseMs: '$3',
  aliveKey: '$4',
  set: [`status = 'active'`, 'attempts = t.attempts + 1'],
  returning: 't.batch_id, t.fence',
});
const HEARTBEAT = renewLease(QUEUE, { key: '$1', fence: '$2', owner: '$3', leaseMs: '$4', and: ACTIVE });
const REQUEUE = releaseLease(QUEUE, {
  key: '$1',
  fence: '$2',
  owner: '$3',
  and: ACTIVE,
  set: [`status = CASE WHEN $4 > 0 THEN 'delayed' ELSE 'ready' END`, `run_at = clock_timestamp() + $4 * interval '1 millisecond'`],
});
// A worker that died (its liveness key is gone) is reaped at the next poll; one that stalled, when its lease ends.
const RECOVER_STALE = reapExpired(QUEUE, { held: ACTIVE, set: [`status = 'ready'`] });

/**
 * The batch work queue in PostgreSQL (table `image_batch_queue`, one row per live batch):
 * - ready → active by `claim` (a locked pick, `claim-queue.ts`, so replicas never take the same row;
 *   the fence goes up by one on every claim);
 * - active → ready/delayed by `requeue` (owner and fence checked);
 * - active with an expired lease, or whose claimer's liveness key no session holds any more (its
 *   replica died) → ready by `recoverStale`;
 * - delayed → ready by `moveDue` once its time has come.
 * Times are the database clock, so replicas with skewed clocks agree.
 */
export class ImageQueue {
  /** `aliveKey`: this replica's liveness key, recorded with each claim (null or absent: leases can only expire). */
  constructor(
    private readonly db: Db,
    private readonly aliveKey: () => number | null = () => null,
  ) {}

  async claim(owner: string, limit: number, leaseMs: number): Promise<BatchLease[]> {
    if (limit <= 0) return [];
    const { rows } = await this.db.query(CLAIM, [owner, limit, leaseMs, this.aliveKey()]);
    return rows.map((r) => ({ batchId: num(r.batch_id), fence: num(r.fence), owner }));
  }

  /** Extends the lease; false when it was lost (recovered as stale, or the batch ended). */
  async heartbeat(l: BatchLease, leaseMs: number): Promise<boolean> {
    const { rowCount } = await this.db.query(HEARTBEAT, [l.batchId, l.fence, l.owner, leaseMs]);
    return rowCount === 1;
  }

  /** Hands the batch back: ready now (delay 0) or delayed until now + delay. */
  async requeue(l: BatchLease, delayMs: number): Promise<boolean> {
    const { rowCount } = await this.db.query(REQUEUE, [l.batchId, l.fence, l.owner, Math.max(0, Math.round(delayMs))]);
    return rowCount === 1;
  }

  /** Active rows whose lease ran out (their worker stalled) or whose claimer is dead go back to ready. */
  async recoverStale(): Promise<number> {
    return (await this.db.query(RECOVER_STALE)).rowCount;
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

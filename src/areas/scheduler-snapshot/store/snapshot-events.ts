import type { Queryable } from '../../../store/db.js';

/**
 * The scheduler snapshot's enqueue: how another area (accounts and proxies) tells the snapshot a
 * row it caches changed. One `scheduler_outbox` row, written on the caller's transaction so the
 * change and its event commit together (the outbox consumer applies it later). The outbox is this
 * area's table: no other area writes it (test/table-owners.test.ts).
 */
export async function enqueueSnapshotEvent(q: Queryable, eventType: string, payload: Record<string, unknown>): Promise<void> {
  await q.query(`INSERT INTO scheduler_outbox (event_type, payload) VALUES ($1, $2::jsonb)`, [eventType, JSON.stringify(payload)]);
}

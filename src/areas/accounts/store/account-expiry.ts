import type { Db } from '../../../store/db.js';
import { num } from '../../../store/db.js';
import { enqueueSnapshotEvent } from '../../scheduler-snapshot/index.js';

// Every due account paused; the row locks make a concurrent run wait and then find none.
const PAUSE_EXPIRED = `
UPDATE accounts SET schedulable = false, updated_at = clock_timestamp()
 WHERE auto_pause_on_expired AND schedulable AND expires_at <= clock_timestamp()
 RETURNING id`;

/**
 * account_expiry's write: accounts with `auto_pause_on_expired` past `expires_at` become
 * unschedulable, and one scheduler-snapshot event lists them (the snapshot's enqueue), in one
 * transaction. Returns how many.
 */
export async function pauseExpiredAccounts(db: Db): Promise<number> {
  return db.tx(async (q) => {
    const ids = (await q.query<{ id: string }>(PAUSE_EXPIRED)).rows.map((r) => num(r.id)).sort((a, b) => a - b);
    if (ids.length) await enqueueSnapshotEvent(q, 'account_bulk_changed', { reason: 'account_expired', account_ids: ids });
    return ids.length;
  });
}

import type { Db } from '../../../store/db.js';
import { dueInMs } from '../../../store/next-due.js';

/** A ready or delayed batch's run time, or an active batch's lease expiry (stale recovery): lease expiry, not a due time, holds that work. */
const NEXT = `SELECT EXTRACT(EPOCH FROM min(CASE WHEN status = 'active' THEN locked_until ELSE run_at END) - clock_timestamp()) * 1000 AS ms FROM image_batch_queue`;

/** When the batch worker's work is next due, on the database clock (`store/next-due.ts`): ms from now, negative when due, null when none. */
export class ImageQueueDue {
  constructor(private readonly db: Db) {}

  inMs(): Promise<number | null> {
    return dueInMs(this.db, NEXT);
  }
}

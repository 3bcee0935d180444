import { num, type Db } from './db.js';

/**
 * When the loops' work is next due, read from the data (issue 26): a loop with nothing to claim
 * sleeps until then (or a wake-up, or the backstop) instead of polling on a fixed short tick.
 * Each answer is milliseconds from now on the database clock (so replica clock skew does not
 * enter), negative when something is already due, or null when nothing is scheduled at all.
 * Lease expiry is in the answer where a lease, not a due time, is what holds the work.
 */
const SQL = {
  /** The earliest slot of an enabled monitor (the claim moves it to the next slot). */
  monitors: `SELECT EXTRACT(EPOCH FROM min(next_due_at) - clock_timestamp()) * 1000 AS ms FROM monitors WHERE enabled`,
  /** The earliest occurrence of an enabled account-test plan. */
  accountTests: `SELECT EXTRACT(EPOCH FROM min(next_run_at) - clock_timestamp()) * 1000 AS ms FROM account_test_plans WHERE enabled`,
  /** A ready or delayed batch's run time, or an active batch's lease expiry (stale recovery). */
  imageQueue: `SELECT EXTRACT(EPOCH FROM min(CASE WHEN status = 'active' THEN locked_until ELSE run_at END) - clock_timestamp()) * 1000 AS ms FROM image_batch_queue`,
} as const;

export type NextDueTable = keyof typeof SQL;

export class NextDue {
  constructor(private readonly db: Db) {}

  async inMs(table: NextDueTable): Promise<number | null> {
    const { rows } = await this.db.query(SQL[table]);
    const v = rows[0]?.ms;
    return v === null || v === undefined ? null : num(v);
  }
}

import type { Db } from '../../../store/db.js';

// One statement: pause every due account and record one outbox event listing them, atomically.
const PAUSE_EXPIRED = `
WITH paused AS (
  UPDATE accounts SET schedulable = false, updated_at = clock_timestamp()
  WHERE auto_pause_on_expired AND schedulable AND expires_at <= clock_timestamp()
  RETURNING id
), event AS (
  INSERT INTO scheduler_outbox (event_type, payload)
  SELECT 'account_bulk_changed', jsonb_build_object('reason', 'account_expired', 'account_ids', jsonb_agg(id ORDER BY id)) FROM paused
  HAVING count(*) > 0
  RETURNING id
)
SELECT (SELECT count(*) FROM paused) AS paused, (SELECT count(*) FROM event) AS events`;

/** account_expiry's write: accounts with `auto_pause_on_expired` past `expires_at` become unschedulable. Returns how many. */
export async function pauseExpiredAccounts(db: Db): Promise<number> {
  const { rows } = await db.query<{ paused: string }>(PAUSE_EXPIRED);
  return Number(rows[0]!.paused);
}

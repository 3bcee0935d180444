import type { Queryable } from '../../../store/db.js';
import { num } from '../../../store/db.js';

/**
 * Billing's face for money other areas hold against a user's balance (images' paid batches):
 * every function takes the caller's transaction, so the hold and the caller's own rows (a batch,
 * its money ledger) commit or roll back together. `billing_users` is billing's table: no other
 * area writes it (test/table-owners.test.ts).
 */

/** Locks the user's row for the caller's transaction (serialises one user's holds); false when there is no such user. */
export async function lockBillingUser(q: Queryable, userId: number): Promise<boolean> {
  return (await q.query(`SELECT 1 FROM billing_users WHERE id = $1 FOR UPDATE`, [userId])).rows.length === 1;
}

export type HoldResult = { kind: 'held' } | { kind: 'insufficient'; balance: number; shortfall: number } | { kind: 'no_user' };

/** Moves `amount` from the user's balance to their frozen balance, only when the balance covers it. */
export async function holdBalance(q: Queryable, userId: number, amount: number): Promise<HoldResult> {
  const held = await q.query(
    `UPDATE billing_users SET balance = balance - $2, frozen_balance = frozen_balance + $2, updated_at = clock_timestamp() WHERE id = $1 AND balance >= $2 RETURNING balance`,
    [userId, amount],
  );
  if (held.rows.length === 1) return { kind: 'held' };
  const user = (await q.query(`SELECT balance FROM billing_users WHERE id = $1`, [userId])).rows[0];
  return user ? { kind: 'insufficient', balance: num(user.balance), shortfall: amount - num(user.balance) } : { kind: 'no_user' };
}

/**
 * Ends a hold of `hold`: `cost` of it is captured (spent), the rest goes back to the balance. A
 * release is a settle with cost 0. The caller guarantees it settles a hold once (images' money
 * ledger row, claimed in the same transaction).
 */
export async function settleHold(q: Queryable, userId: number, hold: number, cost: number): Promise<void> {
  await q.query(`UPDATE billing_users SET frozen_balance = frozen_balance - $2, balance = balance + $3, updated_at = clock_timestamp() WHERE id = $1`, [userId, hold, hold - cost]);
}

/**
 * Issue 24 (dead claimer's work taken over at once) and the one claim queue (`claim-queue.ts`):
 * - `image_batch_queue.locked_alive_key`, `notification_deliveries.claimed_alive_key`: the
 *   claimer's liveness key (`coordination/liveness.ts`); a lease whose key no session holds is
 *   free at once, not after it expires.
 * - `account_test_plans.due_now`: the next claim is the immediate test of a create or edit (never
 *   skipped as late); `account_test_plans.missed`: phase slots skipped as more than half an
 *   interval late, counted.
 */
export const sql = `
ALTER TABLE image_batch_queue ADD COLUMN locked_alive_key integer;
ALTER TABLE notification_deliveries ADD COLUMN claimed_alive_key integer;
ALTER TABLE account_test_plans ADD COLUMN due_now boolean NOT NULL DEFAULT false;
ALTER TABLE account_test_plans ADD COLUMN missed bigint NOT NULL DEFAULT 0;
`;

/**
 * Issue 24: monitors spread by a hash of their id, probed at once when created or edited, and
 * taken over at once from a dead replica.
 * - `monitors.due_now`: the next claim is the immediate probe of a create or edit (not a phase
 *   slot, so never skipped as late); after it, the monitor runs on its phase slots.
 * - `monitors.lease_alive_key`, `account_test_plans.lease_alive_key`: the claimer's liveness key
 *   (`coordination/liveness.ts`); a lease whose key no session holds is free at once.
 */
export const sql = `
ALTER TABLE monitors ADD COLUMN due_now boolean NOT NULL DEFAULT false;
ALTER TABLE monitors ADD COLUMN lease_alive_key integer;
ALTER TABLE account_test_plans ADD COLUMN lease_alive_key integer;
`;

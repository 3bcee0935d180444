/**
 * The refresh request in flight, recorded before it is sent (issue 29): which refresh token was
 * presented (a fingerprint, never the token), when (database clock) and by which lease owner.
 * Cleared by the write that stores the provider's answer, so a row that still carries it after
 * its sender died names a send whose reply was never stored: the survivor retries with the same
 * token at once, and an `invalid_grant` for it means the rotation was lost in the crash.
 */
export const sql = `
ALTER TABLE accounts
  ADD COLUMN refresh_sent_at timestamptz,
  ADD COLUMN refresh_sent_fp text,
  ADD COLUMN refresh_sent_by text;
`;

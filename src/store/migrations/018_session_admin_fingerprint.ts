/**
 * Admin sessions are bound to the admin token that minted them: `admin_fingerprint` is a hash of
 * that token, and a session verifies only while the process's admin token has the same one, so
 * rotating RELAY_JOBS_ADMIN_TOKEN ends every session minted with the old token. Sessions from
 * before this migration have no fingerprint and end with it (sign in again once).
 */
export const sql = `
ALTER TABLE admin_sessions ADD COLUMN admin_fingerprint text;
`;

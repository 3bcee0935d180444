/**
 * Issue 48: a backup's lease follows the one rule every lease follows (store/liveness-sql.ts):
 * free when it expired, or when its writer recorded a liveness key that no session holds any
 * more. `lease_alive_key` is that key (null in embedded mode: expiry alone).
 */
export const sql = `
ALTER TABLE backups ADD COLUMN lease_alive_key integer;
`;

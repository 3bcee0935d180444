/**
 * The crash detector's SQL test, shared by every lease that records its holder's liveness key
 * (`coordination/liveness.ts` holds the lock; the slot claim, monitors and account-test plans
 * read it). A replica holds the session advisory lock `(LIVENESS_NS, key)` on one dedicated
 * session for its whole life; the server frees it the moment that session ends.
 */
export const LIVENESS_NS = 1381649996; // first int4 of the two-key advisory lock; objsubid = 2 in pg_locks

/** SQL: true when the session advisory lock of the holder's liveness key is granted to some session (of this database). */
export const holderAliveSql = (keyExpr: string) => `EXISTS (
  SELECT 1 FROM pg_locks l
   WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
     AND l.classid = ${LIVENESS_NS}::oid AND l.objid = (${keyExpr})::oid
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))`;

/**
 * SQL: a lease that is free to claim: it expired (`untilExpr` passed `nowExpr`), or its holder
 * recorded a liveness key that no session holds any more (the holder's process is dead).
 */
export const leaseFreeSql = (untilExpr: string, keyExpr: string, nowExpr = 'clock_timestamp()') =>
  `(${untilExpr} IS NULL OR ${untilExpr} <= ${nowExpr} OR (${keyExpr} IS NOT NULL AND NOT ${holderAliveSql(keyExpr)}))`;

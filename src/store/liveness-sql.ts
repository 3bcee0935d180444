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
 * How a lease names its holder: the liveness key the holder recorded on the lease row
 * (`aliveKey`, an expression: claim queues, monitors, backups), or a registered process's owner
 * string `<instance id>:<boot id>` judged by its `instances` row (`owner`, with the liveness
 * window `windowMs` as a SQL expression: refresh leases, whose rows predate liveness keys). Either
 * way the holder is alive by the same test (`instanceAliveSql`: its liveness session held; a
 * replica without one, beating within the window).
 */
export type LeaseHolder = string | { owner: string; windowMs: string };

/**
 * SQL: the one definition of a lease that is free to claim, for every lease of the system: it
 * expired (`untilExpr` passed `nowExpr`), or its holder's liveness is gone (the holder's process
 * is dead: taken over at once, not a lease period later). A string `holder` is a liveness key
 * expression (null: expiry alone decides).
 */
export const leaseFreeSql = (untilExpr: string, holder: LeaseHolder, nowExpr = 'clock_timestamp()') =>
  `(${untilExpr} IS NULL OR ${untilExpr} <= ${nowExpr} OR ${typeof holder === 'string' ? `(${holder} IS NOT NULL AND NOT ${holderAliveSql(holder)})` : holderDeadSql(holder.owner, holder.windowMs)})`;

/**
 * The one test of "this replica is alive" over its `instances` row `m` (`windowMs`: a SQL
 * expression, the liveness window of three heartbeats): not stopped, and, when it publishes a
 * liveness key, still holding it (a crashed replica is dead the moment its session ends, however
 * fresh its last beat, and a live one stays alive through a stalled beat), or, without a key,
 * beating within the window. The beat's membership lists (coordination/instance-registry.ts) and
 * the takeover of a dead owner's lease (`holderDeadSql`) both use it.
 */
export const instanceAliveSql = (m: string, windowMs: string) =>
  `(${m}.stopped_at IS NULL AND CASE WHEN ${m}.alive_key IS NOT NULL THEN ${holderAliveSql(`${m}.alive_key`)}
    ELSE ${m}.heartbeat_at > clock_timestamp() - make_interval(secs => ${windowMs}::double precision / 1000) END)`;

/** A registered process's lease owner: `<instance id>:<boot id>` (a UUID); anything else is never judged dead. */
const REGISTERED_OWNER = "':[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'";

/**
 * SQL: true when the lease owner `owner` (an expression) is a registered process whose liveness
 * has ended: no live `instances` row with its instance id and boot id, by the one liveness test
 * (`instanceAliveSql`: liveness session gone, or beat stale where it has none, or stopped, or
 * its instance id restarted under a new boot). `windowMs` is the liveness window's parameter.
 * Owners in any other form (a one-shot CLI process, a release before this one, a gateway) are
 * never judged dead here: their leases expire.
 */
export const holderDeadSql = (owner: string, windowMs: string) => `(${owner} ~ ${REGISTERED_OWNER} AND NOT EXISTS (
  SELECT 1 FROM instances m WHERE m.instance_id = left(${owner}, length(${owner}) - 37) AND m.boot_id = right(${owner}, 36)
     AND ${instanceAliveSql('m', windowMs)}))`;

import { holderAliveSql } from './liveness.js';

/**
 * The one test of "this replica is alive" over its `instances` row `m` (`windowMs`: a SQL
 * expression, the liveness window of three heartbeats): not stopped, and, when it publishes a
 * liveness key, still holding it (a crashed replica is dead the moment its session ends, however
 * fresh its last beat, and a live one stays alive through a stalled beat), or, without a key,
 * beating within the window. The beat's membership lists (instance-registry.ts) and the takeover
 * of a dead holder's lease (`holderDeadSql`) both use it.
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

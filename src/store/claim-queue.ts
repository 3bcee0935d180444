/**
 * The one claim queue: "claim due rows under a lease and a fence, renew, release under the
 * fence, reap expired leases, and take over at once a row whose claimer is dead", as named SQL
 * (pg-boss `plans.ts` style). Every store that hands rows to workers builds its statements here
 * (monitors, account tests, image queue, notifications, scheduler outbox, range tasks, channel
 * budget), so the lease rules are written once and proved once (`test/claim-queue.test.ts`, on
 * PostgreSQL and PGlite). One claim is not `claimDue`: a monitor's (probes' `store/monitors.ts`)
 * skips a slot claimed too late without taking its lease, so that statement writes its own CASE
 * assignments around this module's `lockedPick` and `leaseFree` (its release uses `heldBy`).
 * `lockedPick` is the one builder of a `SKIP LOCKED` clause; stores never write it themselves.
 *
 * A lease is three columns of the row itself: who holds it (`owner`), until when (`until`,
 * database clock, so replicas with skewed clocks agree) and, optionally, the holder's liveness
 * key (`aliveKey`, `coordination/liveness.ts`). A `fence` column, where the table has one, goes
 * up by one on every claim; a worker's later writes name the fence it was given.
 *
 * The builders return SQL text only. Table and column names come from the stores' constants,
 * never from input; values are the caller's `$n` parameters, passed in as expressions.
 */
import { leaseFreeSql } from './liveness-sql.js';

/** Where a table keeps its lease. Names are constants of the store, never input. */
export interface LeaseTable {
  table: string;
  /** The row key: one column, or the columns of a composite key. */
  key: string | string[];
  /** Holder column (an instance id or a claim token). */
  owner: string;
  /** Lease deadline column (timestamptz, database clock). */
  until: string;
  /** Fence column (bigint), bumped on every claim; absent: the owner alone identifies the claim. */
  fence?: string;
  /** Holder's liveness key column (integer); absent: a lease can only expire. */
  aliveKey?: string;
}

/** Milliseconds (a `$n` or literal expression) as an interval. */
export const msInterval = (ms: string) => `make_interval(secs => (${ms})::double precision / 1000)`;

/**
 * SQL condition: the row's lease is free to take. It never was taken or was released (`until` is
 * null), it expired, or its holder recorded a liveness key that no session holds any more (the
 * holder's process is dead: taken over at once, not after the lease). `alias` qualifies columns.
 */
export function leaseFree(t: LeaseTable, now = 'clock_timestamp()', alias = ''): string {
  const c = (col: string) => (alias ? `${alias}.${col}` : col);
  if (!t.aliveKey) return `(${c(t.until)} IS NULL OR ${c(t.until)} <= ${now})`;
  return leaseFreeSql(c(t.until), c(t.aliveKey), now);
}

/**
 * SQL condition: the lease is held by the holder of `fence` (and `owner`, when given). Every
 * write of a claimed row's worker carries it: a claimer whose lease was taken over holds an older
 * fence, so its write matches no row (the stale fence cannot release, renew or write).
 */
export function heldBy(t: LeaseTable, p: { fence?: string; owner?: string }, alias = ''): string {
  const c = (col: string) => (alias ? `${alias}.${col}` : col);
  const parts: string[] = [];
  if (p.fence !== undefined) {
    if (!t.fence) throw new Error(`${t.table} has no fence column`);
    parts.push(`${c(t.fence)} = ${p.fence}`);
  }
  if (p.owner !== undefined) parts.push(`${c(t.owner)} = ${p.owner}`);
  if (!parts.length) throw new Error('heldBy needs a fence or an owner');
  return parts.join(' AND ');
}

export interface ClaimPlan {
  /** Extra condition a claimable row meets (its status, due time, filters); the lease condition is added unless `free` replaces it. */
  due: string;
  /** Replaces the lease-free condition (e.g. "ready, or active with a free lease"). */
  free?: string;
  order: string;
  limit: string;
  owner: string;
  leaseMs: string;
  /** The claimer's liveness key expression (`$n::int`), recorded when the table has the column. */
  aliveKey?: string;
  /** Extra assignments (`col = expr`, `t.` is the row). */
  set?: string[];
  returning: string;
  /** The instant the claim is made at (default the database clock). */
  now?: string;
  /** Prepended CTEs (`name AS (…)`, comma-joined) the other parts may read. */
  with?: string[];
}

/**
 * A locked pick: `SELECT … FROM … WHERE … ORDER BY … LIMIT … FOR UPDATE [OF …] SKIP LOCKED`. The one
 * place a statement is given `SKIP LOCKED`: rows another transaction has locked are passed over,
 * never waited on, so replicas take disjoint rows side by side and a busy row costs no wait. The
 * claim plans use it, and so do the statements that are not a claim plan: a monitor's claim (a
 * late slot is skipped without taking the lease), the outbox's batched delete, the change
 * stream's one-publisher lock. `of` names the table locked when `from` joins others.
 */
export function lockedPick(p: { select: string; from: string; where?: string; order?: string; limit?: string; of?: string }): string {
  const parts = [`SELECT ${p.select} FROM ${p.from}`];
  if (p.where) parts.push(`WHERE ${p.where}`);
  if (p.order) parts.push(`ORDER BY ${p.order}`);
  if (p.limit) parts.push(`LIMIT ${p.limit}`);
  parts.push(`FOR UPDATE${p.of ? ` OF ${p.of}` : ''} SKIP LOCKED`);
  return parts.join(' ');
}

/**
 * Claims up to `limit` due rows in one statement. Invariant (two claimers never hold one row):
 * the candidate rows are locked `FOR UPDATE SKIP LOCKED` and re-checked under that lock, so two
 * concurrent claims take disjoint rows, and a row whose lease is held (unexpired, holder alive)
 * is not a candidate at all. The fence goes up by one, so the previous holder's fence is stale.
 */
export function claimDue(t: LeaseTable, p: ClaimPlan): string {
  return `WITH ${[...(p.with ?? []), ...claimCtes(t, p, 'claimed')].join(',\n')}
SELECT * FROM claimed`;
}

/**
 * The same claim as two CTEs (`picked`, then `name` holding the claimed rows' RETURNING), for a
 * statement that reads what it claimed in the same round trip (the channel budget's free time).
 */
export function claimCtes(t: LeaseTable, p: ClaimPlan, name: string): string[] {
  const now = p.now ?? 'clock_timestamp()';
  const keys = keyCols(t);
  const sets = [`${t.owner} = ${p.owner}`, `${t.until} = ${now} + ${msInterval(p.leaseMs)}`];
  if (t.fence) sets.push(`${t.fence} = t.${t.fence} + 1`);
  if (t.aliveKey) sets.push(`${t.aliveKey} = ${p.aliveKey ?? 'NULL'}::int`);
  sets.push(...(p.set ?? []));
  return [
    `picked AS (${lockedPick({ select: keys.join(', '), from: t.table, where: `(${p.due}) AND ${p.free ?? leaseFree(t, now)}`, order: p.order, limit: p.limit })})`,
    `${name} AS (UPDATE ${t.table} t SET ${sets.join(', ')}
  FROM picked WHERE ${keys.map((k) => `t.${k} = picked.${k}`).join(' AND ')}
  RETURNING ${p.returning})`,
  ];
}

const keyCols = (t: LeaseTable) => (Array.isArray(t.key) ? t.key : [t.key]);

/** `key = $n`, `key = ANY($n)`, or nothing (the row is matched by `and` and its holder). */
function keyMatch(t: LeaseTable, p: { key?: string; keyIn?: string }): string[] {
  const [k] = keyCols(t);
  if (p.keyIn) return [`${k} = ANY(${p.keyIn})`];
  if (p.key) return [`${k} = ${p.key}`];
  return [];
}

/**
 * Extends a held lease to now + `leaseMs`; matches no row once the lease was taken over (stale
 * fence or owner). `aliveKey`: the holder's current liveness key, recorded with the renewal (a
 * holder whose liveness session was replaced would otherwise look dead and be taken over).
 */
export function renewLease(t: LeaseTable, p: { key?: string; keyIn?: string; fence?: string; owner?: string; leaseMs: string; aliveKey?: string; and?: string }): string {
  if (p.aliveKey !== undefined && !t.aliveKey) throw new Error(`${t.table} has no liveness key column`);
  const sets = [`${t.until} = clock_timestamp() + ${msInterval(p.leaseMs)}`, ...(p.aliveKey !== undefined ? [`${t.aliveKey} = ${p.aliveKey}`] : [])];
  const where = [...keyMatch(t, p), heldBy(t, p), `${t.until} IS NOT NULL`, ...(p.and ? [p.and] : [])];
  return `UPDATE ${t.table} SET ${sets.join(', ')}
WHERE ${where.join(' AND ')}`;
}

/**
 * Frees a held lease, with the row's other changes of the same write (`set`). Invariant (a
 * stale fence cannot release or write): the row is matched on its key AND the fence/owner the
 * claim was given; a holder whose lease was taken over matches nothing and changes nothing.
 */
export function releaseLease(t: LeaseTable, p: { key?: string; keyIn?: string; fence?: string; owner?: string; set?: string[]; and?: string; returning?: string }): string {
  const sets = [`${t.owner} = NULL`, `${t.until} = NULL`, ...(t.aliveKey ? [`${t.aliveKey} = NULL`] : []), ...(p.set ?? [])];
  // `until IS NOT NULL`: a lease released once (or reaped) cannot be released, nor renewed, again under the same fence.
  const where = [...keyMatch(t, p), heldBy(t, p), `${t.until} IS NOT NULL`, ...(p.and ? [p.and] : [])];
  return `UPDATE ${t.table} SET ${sets.join(', ')}
WHERE ${where.join(' AND ')}${p.returning ? `\nRETURNING ${p.returning}` : ''}`;
}

/**
 * Frees every lease that expired or whose holder is dead (a worker died or stalled), with the
 * row's reset (`set`, e.g. back to `ready`). `held` says which rows count as leased (a status).
 * The fence is not touched: the next claim bumps it, which is what shuts the old holder out.
 */
export function reapExpired(t: LeaseTable, p: { held: string; set?: string[] }): string {
  const sets = [`${t.owner} = NULL`, `${t.until} = NULL`, ...(t.aliveKey ? [`${t.aliveKey} = NULL`] : []), ...(p.set ?? [])];
  return `UPDATE ${t.table} SET ${sets.join(', ')}
WHERE (${p.held}) AND ${t.until} IS NOT NULL AND ${leaseFree(t)}`;
}

import { systemClock, type Clock } from '../time/clock.js';

/**
 * "Now" for SQL that compares with it, as a parameter (River's `coalesce($now, now())`): null on
 * the system clock, so the database's own clock decides (one clock for every replica, whatever
 * theirs say); the injected clock's time otherwise, so a test that moves a `ManualClock` moves
 * what the statement sees, without waiting. Use it as `${sqlNowParam(n)}` with `sqlNow(clock)`
 * as parameter n.
 */
export function sqlNow(clock: Clock): Date | null {
  return clock === systemClock ? null : new Date(clock.now());
}

/** The statement's side: parameter `n` when given, else the database clock. */
export const sqlNowParam = (n: number): string => `coalesce($${n}::timestamptz, clock_timestamp())`;

/**
 * SQL: whole milliseconds from `from` to `to` (the database clock by default), never negative (a
 * row's start written by another replica's statement may be a hair later): a finished record's
 * `duration_ms`.
 */
export const elapsedMsSql = (from: string, to = 'clock_timestamp()'): string => `GREATEST(0, round(extract(epoch FROM (${to} - ${from})) * 1000))::int`;

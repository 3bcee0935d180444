import { num, type Db } from './db.js';

/**
 * When a loop's work is next due, read from the data (issue 26): a loop with nothing to claim
 * sleeps until then (or a wake-up, or the backstop) instead of polling on a fixed short tick.
 * The query is the owning area's (its store/ names its table); this reads its one column `ms`:
 * milliseconds from now on the database clock (so replica clock skew does not enter), negative
 * when something is already due, or null when nothing is scheduled at all.
 */
export async function dueInMs(db: Db, sql: string): Promise<number | null> {
  const { rows } = await db.query(sql);
  const v = rows[0]?.ms;
  return v === null || v === undefined ? null : num(v);
}

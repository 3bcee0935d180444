/**
 * Poison isolation for batch writers. A batch the database refuses for the *content* of a row
 * (SQLSTATE class 22 data exception: a NUL, a lone surrogate, a number out of range; class 23
 * integrity violation) would be refused again on every retry, blocking everything queued
 * behind it. Such a batch is split in halves until the offending rows stand alone; the good
 * rows are written, the offending ones are returned to be dead-lettered. Any other error
 * (connection lost, server shutting down) is not about the rows and is thrown unchanged, for
 * the caller's ordinary retry.
 *
 * Writers must be idempotent per row (request ids, monotonic upserts): a split re-sends rows
 * that a failed statement did not write, and a retry after a dead-letter write failure re-sends
 * rows that were written.
 */

// NUL cannot be stored in PostgreSQL text or jsonb; a lone surrogate is not valid UTF-8 at all.
// eslint-disable-next-line no-control-regex -- NUL is exactly what this must find
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** True when PostgreSQL can store the text (no NUL, no lone surrogate). */
export function isStorableText(s: string): boolean {
  return !UNSTORABLE.test(s);
}

/** True when the database refused the statement because of the data it carried. */
export function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && /^(22|23)[0-9A-Z]{3}$/.test(code);
}

export interface SplitResult<T> {
  written: number;
  poisoned: Array<{ row: T; reason: string }>;
}

/** Writes `rows` with `write` (returns rows written), isolating the rows the database refuses for their content. */
export async function writeIsolatingPoison<T>(rows: T[], write: (rows: T[]) => Promise<number>): Promise<SplitResult<T>> {
  const result: SplitResult<T> = { written: 0, poisoned: [] };
  const pending: T[][] = [rows];
  while (pending.length) {
    const part = pending.pop()!;
    if (!part.length) continue;
    try {
      result.written += await write(part);
    } catch (err) {
      if (!isDataError(err)) throw err;
      if (part.length === 1) {
        result.poisoned.push({ row: part[0]!, reason: `${(err as { code: string }).code}: ${(err as Error).message}` });
        continue;
      }
      const mid = Math.ceil(part.length / 2);
      pending.push(part.slice(mid), part.slice(0, mid));
    }
  }
  return result;
}

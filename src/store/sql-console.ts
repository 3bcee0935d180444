import type { Db } from './db.js';

export class SqlRefused extends Error {}

export interface SqlResult {
  columns: string[];
  rows: Array<Record<string, unknown>>;
  truncated: boolean;
}

/** More rows than this are cut (and said to be); the console is for looking, not exporting. */
const MAX_ROWS = 1000;

/**
 * The SQL that docs/operations.md shows, for embedded mode, where PGlite lives inside the
 * service and no `psql` can connect: one statement, run in a READ ONLY transaction (a write is
 * refused by PostgreSQL itself), through `relay-jobs sql` or `POST /api/v1/sql`.
 */
export async function readOnlyQuery(db: Db, text: string): Promise<SqlResult> {
  const statement = text.trim().replace(/;\s*$/, '');
  if (!statement) throw new SqlRefused('expected one SQL statement');
  if (statement.includes(';')) throw new SqlRefused('expected one SQL statement (no ";" inside)');
  return db.tx(async (q) => {
    await q.query('SET TRANSACTION READ ONLY');
    const { rows } = await q.query<Record<string, unknown>>(statement);
    return { columns: rows[0] ? Object.keys(rows[0]) : [], rows: rows.slice(0, MAX_ROWS), truncated: rows.length > MAX_ROWS };
  });
}

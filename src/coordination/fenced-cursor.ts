import type { Db } from '../store/db.js';
import { num } from '../store/db.js';
import { FencedWriteRefused } from '../errors/app-error.js';

export { FencedWriteRefused };

// The write succeeds only if the token is at least the job's latest grant and the cursor's stored token.
// $1 job, $2 key, $3 value json, $4 token
const WRITE = `
INSERT INTO job_cursors (job_name, key, value, fencing_token)
SELECT $1, $2, $3::jsonb, $4::bigint
 WHERE $4::bigint >= (SELECT fencing_token FROM job_state WHERE job_name = $1)
ON CONFLICT (job_name, key) DO UPDATE
   SET value = EXCLUDED.value, fencing_token = EXCLUDED.fencing_token, updated_at = clock_timestamp()
 WHERE job_cursors.fencing_token <= EXCLUDED.fencing_token
RETURNING 1`;

/**
 * The same fenced write as a CTE named `fenced` (one row when accepted; $1 job, $2 key, $3 value
 * json, $4 token), for a statement that writes something else in the same round trip only if the
 * write was accepted (the canary's end row).
 */
export const FENCED_WRITE_CTE = `fenced AS (${WRITE.trim()})`;

/**
 * Job state that must never move backwards (watermarks, cursors). A round that lost its lease
 * (a newer token was granted) can no longer write, even if it does not know yet that it lost.
 */
export class FencedCursors {
  constructor(private readonly db: Db) {}

  async write(job: string, key: string, value: unknown, token: number): Promise<void> {
    const { rowCount } = await this.db.query(WRITE, [job, key, JSON.stringify(value), token]);
    if (rowCount !== 1) throw new FencedWriteRefused(job, key, token);
  }

  async read<T = unknown>(job: string, key: string): Promise<{ value: T; token: number } | null> {
    const { rows } = await this.db.query<{ value: T; fencing_token: unknown }>('SELECT value, fencing_token FROM job_cursors WHERE job_name = $1 AND key = $2', [job, key]);
    return rows[0] ? { value: rows[0].value, token: num(rows[0].fencing_token) } : null;
  }
}

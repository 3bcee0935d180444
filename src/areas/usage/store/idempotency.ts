import { Conflict } from '../../../errors/app-error.js';
import { createHash } from 'node:crypto';
import type { Db } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';

export type BeginResult = { state: 'started' } | { state: 'in_progress'; locked_until: string } | { state: 'replay'; response: unknown; status_code: number | null };

/** The same key came back with a different request: never replayed, never run. */
export class IdempotencyConflict extends Conflict {
  constructor(scope: string, key: string) {
    super('idempotency_conflict', `idempotency key ${JSON.stringify(key)} in scope ${JSON.stringify(scope)} was first used with a different request body; use a new key for a new request`);
  }
}

/** A stable hash of a request body: object keys sorted, so key order does not matter. */
export function requestHash(body: unknown): string {
  const canon = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(canon)
      : v && typeof v === 'object'
        ? Object.fromEntries(
            Object.keys(v)
              .sort()
              .map((k) => [k, canon((v as Record<string, unknown>)[k])]),
          )
        : v;
  return createHash('sha256')
    .update(JSON.stringify(canon(body) ?? null))
    .digest('hex');
}

/**
 * Keyed operations for the gateway: `begin` claims (scope, key) for a request hash; a repeat of
 * a completed operation replays its stored response; one still running answers `in_progress`
 * until its lock lapses (then the next caller takes it over); another body under the same key
 * is a conflict. Records expire after the TTL and are deleted by idempotency_cleanup.
 */
export class Idempotency {
  constructor(
    private readonly db: Db,
    private readonly ttlMs: number,
    private readonly lockMs: number,
  ) {}

  async begin(scope: string, key: string, hash: string): Promise<BeginResult> {
    const { rows } = await this.db.query(
      `INSERT INTO idempotency_records (scope, key, request_hash, status, locked_until, expires_at)
       VALUES ($1, $2, $3, 'in_progress', clock_timestamp() + $4 * interval '1 millisecond', clock_timestamp() + $5 * interval '1 millisecond')
       ON CONFLICT (scope, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, status = 'in_progress', response = NULL, response_status = NULL,
         locked_until = EXCLUDED.locked_until, expires_at = EXCLUDED.expires_at, created_at = clock_timestamp()
       WHERE idempotency_records.expires_at <= clock_timestamp()
          OR (idempotency_records.status = 'in_progress' AND idempotency_records.locked_until <= clock_timestamp() AND idempotency_records.request_hash = EXCLUDED.request_hash)
       RETURNING 1`,
      [scope, key, hash, this.lockMs, this.ttlMs],
    );
    if (rows.length) return { state: 'started' };
    const existing = (await this.db.query(`SELECT request_hash, status, response, response_status, locked_until FROM idempotency_records WHERE scope = $1 AND key = $2`, [scope, key])).rows[0];
    if (!existing) return this.begin(scope, key, hash); // deleted in between: try again
    if (existing.request_hash !== hash) throw new IdempotencyConflict(scope, key);
    if (existing.status === 'completed') return { state: 'replay', response: existing.response, status_code: existing.response_status === null ? null : num(existing.response_status) };
    return { state: 'in_progress', locked_until: toDate(existing.locked_until)!.toISOString() };
  }

  /** Stores the response; false when there is no running operation under this key and hash. */
  async complete(scope: string, key: string, hash: string, response: unknown, statusCode: number | null): Promise<boolean> {
    const { rowCount } = await this.db.query(
      `UPDATE idempotency_records SET status = 'completed', response = $4::jsonb, response_status = $5, locked_until = NULL
       WHERE scope = $1 AND key = $2 AND request_hash = $3 AND status = 'in_progress'`,
      [scope, key, hash, JSON.stringify(response ?? null), statusCode],
    );
    return rowCount === 1;
  }

  /** Deletes expired records in batches; returns how many. */
  async deleteExpired(batch: number, signal?: AbortSignal): Promise<number> {
    let total = 0;
    for (;;) {
      signal?.throwIfAborted();
      const { rowCount } = await this.db.query(`DELETE FROM idempotency_records WHERE (scope, key) IN (SELECT scope, key FROM idempotency_records WHERE expires_at <= clock_timestamp() LIMIT $1)`, [
        batch,
      ]);
      total += rowCount;
      if (rowCount < batch) return total;
    }
  }
}

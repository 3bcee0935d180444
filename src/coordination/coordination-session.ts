import type { Db, PinnedConnection } from '../store/db.js';

/**
 * The one dedicated PostgreSQL session a replica keeps for coordination: the liveness lock
 * (`liveness.ts`) and, while Redis is down, the fallback leader locks (`advisory-lock.ts`) live
 * on it, so neither takes the pool's connections from the work. It must reach PostgreSQL
 * directly or through session pooling (session advisory locks belong to a server connection).
 *
 * This is the one place such a session is opened. Its `db` is the composition root's session
 * database (`Backends.sessionDb`): a small pool on `DATABASE_DIRECT_URL` when it is set, so the
 * session bypasses a transaction pooler such as PgBouncer; else the service's own pool.
 */
export function openCoordinationSession(db: Db, onClosed: (err: Error) => void): Promise<PinnedConnection> {
  return db.pin(onClosed);
}

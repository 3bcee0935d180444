import type { Db, PinnedConnection } from '../store/db.js';

/**
 * The one dedicated PostgreSQL session a replica keeps for coordination: the liveness lock
 * (`liveness.ts`) and, while Redis is down, the fallback leader locks (`advisory-lock.ts`) live
 * on it, so neither takes the pool's connections from the work. It must reach PostgreSQL
 * directly or through session pooling (session advisory locks belong to a server connection).
 *
 * This is the one place such a session is opened: routing it around a transaction pooler
 * (a direct URL beside `DATABASE_URL`) is a change here and nowhere else.
 */
export function openCoordinationSession(db: Db, onClosed: (err: Error) => void): Promise<PinnedConnection> {
  return db.pin(onClosed);
}

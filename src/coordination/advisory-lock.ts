import type { Db, PinnedConnection } from '../store/db.js';
import type { Acquisition, LeaderLock } from './leader-lock.js';
import { advisoryLockName, type KeySpace } from './keys.js';
import { openCoordinationSession } from './coordination-session.js';

/** Where the replica's coordination session is, when another part (the liveness session) already holds one open. */
export interface SharedSession {
  /** The open session, or null while there is none (lost, reopening, or never opened). */
  readonly session: PinnedConnection | null;
}

const TRY_LOCK = 'SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS ok';
const UNLOCK = 'SELECT pg_advisory_unlock(hashtextextended($1, 0))';

/**
 * The leader lock while Redis is down: a session advisory lock per job, all of them held on the
 * replica's ONE coordination session (the liveness session when crash detection runs, else one
 * session of this lock's own), never one pool connection per round. Twelve jobs starting in the
 * same second during a Redis outage therefore cost one connection, not twelve, and the pool is
 * left to the work (issue 24: with the default pool of 10, half the jobs failed to connect).
 *
 * A session lock is re-entrant for its session, so this replica's own holds are tracked here: a
 * second acquire of a job it already holds (a manual round beside the scheduled one) is refused,
 * as another replica's would be. The lock lives exactly as long as the session; "renewal" proves
 * the session is still the one the lock was taken on. The slot claim, not this lock, guarantees
 * one round per slot (invariant 1), so a lost session costs efficiency only.
 *
 * Statements on one session run one after another (the client queues them); each is a single
 * lock call, so a burst of rounds waits microseconds, not for a connection.
 */
export class PgAdvisoryLock implements LeaderLock {
  /** Job lock name → the session it is held on. */
  private readonly held = new Map<string, PinnedConnection>();
  private own: PinnedConnection | null = null;
  private opening: Promise<PinnedConnection> | null = null;

  constructor(
    private readonly db: Db,
    private readonly keys: KeySpace,
    private readonly shared?: SharedSession,
    private readonly instanceId = 'this replica',
  ) {}

  async acquire(job: string, _ttlMs: number): Promise<Acquisition> {
    const name = advisoryLockName(this.keys, job);
    const mine = this.held.get(name);
    if (mine && this.isOpen(mine)) return { acquired: false, backend: 'postgres', holder: this.instanceId, heldForSlot: null };
    const conn = await this.session();
    this.held.set(name, conn); // reserved before the await: a concurrent acquire of this job is refused
    let ok: boolean;
    try {
      const { rows } = await conn.query<{ ok: boolean }>(TRY_LOCK, [name]);
      ok = rows[0]!.ok === true;
    } catch (err) {
      this.held.delete(name);
      throw err;
    }
    if (!ok) {
      this.held.delete(name);
      return { acquired: false, backend: 'postgres', holder: null, heldForSlot: null };
    }
    let released = false;
    return {
      acquired: true,
      handle: {
        backend: 'postgres',
        renew: async () => {
          if (released || this.held.get(name) !== conn || !this.isOpen(conn)) return false;
          await conn.query('SELECT 1');
          return true;
        },
        release: async () => {
          if (released) return;
          released = true;
          if (this.held.get(name) === conn) this.held.delete(name);
          // A session that is gone took its locks with it; one that fails here is dropping (its error handler closes it).
          if (this.isOpen(conn)) await conn.query(UNLOCK, [name]).catch(() => undefined);
        },
      },
    };
  }

  /** Closes this lock's own session, if it opened one (shutdown, after the rounds ended). */
  close(): void {
    const own = this.own;
    this.own = null;
    own?.release(true);
  }

  /** How many connections the fallback holds beyond the shared session: 0 or 1. */
  get ownSessions(): number {
    return this.own ? 1 : 0;
  }

  private isOpen(conn: PinnedConnection): boolean {
    return conn === this.own || conn === this.shared?.session;
  }

  private async session(): Promise<PinnedConnection> {
    const shared = this.shared?.session ?? null;
    if (shared) {
      // Back on the shared session: our own one goes once nothing is held on it.
      if (this.own && ![...this.held.values()].includes(this.own)) this.close();
      return shared;
    }
    if (this.own) return this.own;
    return (this.opening ??= this.openOwn().finally(() => (this.opening = null)));
  }

  private async openOwn(): Promise<PinnedConnection> {
    const box: { conn: PinnedConnection | null } = { conn: null };
    box.conn = await openCoordinationSession(this.db, () => {
      // The session dropped (server restart, network): its locks went with it; the next acquire opens another.
      if (box.conn && this.own === box.conn) {
        this.own = null;
        box.conn.release(true);
      }
    });
    this.own = box.conn;
    return box.conn;
  }
}

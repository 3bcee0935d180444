import { randomInt } from 'node:crypto';
import type { Db, PinnedConnection } from '../store/db.js';
import type { Logger } from '../telemetry/logger.js';
import { LIVENESS_NS } from '../store/liveness-sql.js';
import { systemClock, type Clock } from '../time/clock.js';
import type { Deadline } from '../time/deadline.js';
import { ServiceLoop, type LoopTickCounter, type TickResult } from '../workers/service-loop.js';
import { openCoordinationSession } from './coordination-session.js';

/**
 * The crash detector: while a replica runs, one dedicated PostgreSQL session of it holds the
 * session advisory lock `(LIVENESS_NS, key)` with a key drawn at random per session. The
 * server frees the lock the moment the session ends, which is the moment the process dies
 * (SIGKILL, OOM, crash: the kernel closes the socket and the backend sees EOF). A slot claim
 * (`slot-claim.ts`) may therefore take a lease over before it expires when the holder's key is
 * no longer granted in `pg_locks`: "holder dead" is known at once, "holder alive but silent"
 * (paused, partitioned) still waits for the lease to expire.
 *
 * The lock is the replica's promise "I am alive"; it must never be gone while the replica still
 * acts on it. So the session is watched: when it drops (server restart, pg_terminate_backend,
 * a pooler closing it) or a self-check finds the lock not held by this very backend (a
 * transaction pooler such as PgBouncer handing the session to another server connection), the
 * key is withdrawn (new claims store none, and fall back to lease expiry), listeners abort the
 * rounds claimed under it, and a new session with a new key is opened after `retryMs`.
 *
 * The reopening is a `ServiceLoop` (`liveness_session`), started by `start`: while the session is
 * open it sleeps on no timer; a loss wakes it, and it opens a new session `retryMs` after the
 * loss, every `retryMs` until one opens. The session itself needs no renewing: the heartbeat's
 * statement carries the self-check (`queryChecked`).
 */
/** Sessions in a row found moved before crash detection is switched off (logged once). */
const MOVED_LIMIT = 3;

export { LIVENESS_NS, holderAliveSql } from '../store/liveness-sql.js';

const LOCK = 'SELECT pg_try_advisory_lock($1::int, $2::int) AS ok, pg_backend_pid() AS pid';
const UNLOCK = 'SELECT pg_advisory_unlock($1::int, $2::int)';
/** Held by this very backend: false under a transaction pooler that moved us to another server connection. */
export const HELD_BY_ME = `(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND classid = ${LIVENESS_NS}::oid AND objid = $LK::oid AND pid = pg_backend_pid()) = 1`;

export interface Liveness {
  /** The key claims record as the holder's, or null while no session holds one (claims then rely on lease expiry). */
  readonly key: number | null;
  /** Called once per lost key with that key; returns an unsubscribe function. */
  onLost(listener: (key: number, reason: string) => void): () => void;
}

export class LivenessSession implements Liveness {
  private conn: PinnedConnection | null = null;
  private current: number | null = null;
  private readonly listeners = new Set<(key: number, reason: string) => void>();
  private readonly openers = new Set<(conn: PinnedConnection) => Promise<void>>();
  private loop: ServiceLoop | null = null;
  private lostAt = -Infinity;
  private stopped = false;
  /** Consecutive sessions found moved to another backend: a transaction pooler, not a blip. */
  private moved = 0;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly retryMs = 1000,
    private readonly clock: Clock = systemClock,
    private readonly ticks?: LoopTickCounter,
  ) {}

  get key(): number | null {
    return this.current;
  }

  /** The open session itself (null while none is): the PostgreSQL fallback holds its leader locks on it. */
  get session(): PinnedConnection | null {
    return this.conn;
  }

  onLost(listener: (key: number, reason: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Called with every session opened (the wake-up listener LISTENs on it); returns an unsubscribe function. */
  onOpened(listener: (conn: PinnedConnection) => Promise<void>): () => void {
    this.openers.add(listener);
    return () => this.openers.delete(listener);
  }

  /** Opens the session and takes a fresh key, then starts the reopening loop. Throws if the database cannot be reached (the caller decides). */
  async start(): Promise<void> {
    this.stopped = false;
    await this.open();
    if (this.loop?.isRunning) return;
    this.loop = new ServiceLoop({
      name: 'liveness_session',
      clock: this.clock,
      log: this.log,
      ticks: this.ticks,
      backstopMs: Infinity,
      errorDelayMs: this.retryMs,
      tick: (signal) => this.reopen(signal),
    });
    this.loop.start();
  }

  /** One tick: nothing while the session is open (or crash detection is off); else a new session, `retryMs` after the loss. */
  private async reopen(signal: AbortSignal): Promise<TickResult> {
    if (this.conn || this.moved >= MOVED_LIMIT) return { items: 0 };
    const at = this.lostAt + this.retryMs;
    if (this.clock.now() < at) return { items: 0, nextDueAt: at };
    await this.open(signal); // a failure: the loop logs it and tries again after retryMs
    return { items: 1 };
  }

  private async open(signal?: AbortSignal): Promise<void> {
    let conn: PinnedConnection | null = null;
    conn = await openCoordinationSession(this.db, (err) => {
      if (conn && this.conn === conn) this.lose(`liveness session dropped: ${err.message}`);
    });
    try {
      for (let i = 0; i < 5; i++) {
        const key = randomInt(1, 2 ** 31 - 1);
        const { rows } = await conn.query<{ ok: boolean }>(LOCK, [LIVENESS_NS, key]);
        if (rows[0]?.ok === true) {
          // Stopped while opening: the lock goes with the closed session, no key is ever handed out.
          if (signal?.aborted || this.stopped) throw new Error('liveness session stopped while opening');
          this.conn = conn;
          this.current = key;
          this.log.info({ liveness_key: key }, 'liveness session open: a crash of this process is seen by the other replicas at once');
          for (const l of this.openers) await l(conn).catch((err: Error) => this.log.warn({ err: err.message }, 'liveness session: an opener failed'));
          return;
        }
      }
      throw new Error('no free liveness key after 5 draws');
    } catch (err) {
      conn.release(true);
      throw err;
    }
  }

  /**
   * Runs `sql` on the liveness session, with `$LK` replaced by the key's parameter; used by the
   * heartbeat so the self-check costs no extra statement. Loses the key if `heldColumn` comes back false.
   */
  async queryChecked<R extends Record<string, unknown>>(sql: string, params: unknown[], heldColumn: keyof R): Promise<R[] | null> {
    const conn = this.conn;
    const key = this.current;
    if (!conn || key === null) return null;
    const text = sql.replaceAll('$LK', `$${params.length + 1}`);
    let rows: R[];
    try {
      rows = (await conn.query<R>(text, [...params, key])).rows;
    } catch (err) {
      // The server refused the statement (a data error in what the beat carries, a statement_timeout
      // set on the role, a deadlock): the session and its lock outlive a failed statement, so the key
      // stays and no round is aborted; the next beat checks the lock again. Anything else (the
      // connection broke, the client's own timeout) leaves the session in doubt: the key goes.
      if (this.conn === conn && !refusedStatement(err)) this.lose(`liveness self-check failed: ${(err as Error).message}`);
      throw err;
    }
    if (rows[0] && rows[0][heldColumn] !== true && this.conn === conn) {
      this.moved += 1;
      this.lose('liveness lock not held by this session (a transaction pooler in between? see docs/coordination.md)');
    } else if (rows[0]) {
      this.moved = 0;
    }
    return rows;
  }

  /**
   * Shutdown: free the key at once (a clean exit must not look like a crash for longer than
   * needed, nor hold a connection). Waits until `by` for a reopening in flight; returns 1 if
   * it was still running (it then closes the session it opens).
   */
  async stop(by: Deadline): Promise<number> {
    this.stopped = true;
    const left = (await this.loop?.stop(by)) ?? 0;
    const conn = this.conn;
    const key = this.current;
    this.conn = null;
    this.current = null;
    if (!conn || key === null) return left;
    // Closed, not returned to the pool: fallback leader locks of a round that outlived the grace may still sit on it.
    await conn.query(UNLOCK, [LIVENESS_NS, key]).catch(() => undefined);
    conn.release(true);
    return left;
  }

  private lose(reason: string): void {
    const conn = this.conn;
    const key = this.current;
    this.conn = null;
    this.current = null;
    if (key === null) return;
    this.log.error({ liveness_key: key, reason }, 'liveness session lost: rounds claimed under it are aborted; claims fall back to lease expiry until a new session is open');
    conn?.release(true);
    for (const l of this.listeners) l(key, reason);
    if (this.stopped) return;
    if (this.moved >= MOVED_LIMIT) {
      // Reopening would only flap: every new session lands behind the same pooler.
      this.log.error(
        { sessions_moved: this.moved },
        "crash detection off: the liveness session keeps moving to other server connections (PgBouncer in transaction mode?). A dead replica's rounds are now taken over when its lease expires (jobs.<name>.lock_ttl), not at once. Fix: set DATABASE_DIRECT_URL to a direct or session-pooled connection, or cluster.crash_detection: lease to silence this",
      );
      return;
    }
    this.lostAt = this.clock.now();
    this.loop?.wake('lost');
  }
}

/**
 * A statement the server refused while keeping the session: it answered with an error of its own
 * (pg sets `severity` only on those), neither FATAL nor PANIC (the words are localized, so the
 * session-ending SQLSTATE classes are checked as well: connection exceptions 08, operator
 * intervention 57P, internal XX, and the idle-in-transaction timeout 25P03). Were one misread, the
 * session's close still withdraws the key (`openCoordinationSession`'s callback).
 */
function refusedStatement(err: unknown): boolean {
  const e = err as { severity?: unknown; code?: unknown } | null;
  if (typeof e?.severity !== 'string' || e.severity === 'FATAL' || e.severity === 'PANIC') return false;
  return !/^(08|57P|XX)|^25P03$/.test(String(e.code ?? ''));
}

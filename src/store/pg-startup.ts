import { delay, monotonic } from '../time/wall.js';
import { PG_TIMEOUT, PgConnectFailure, PgDb, type PgDbOptions } from './pg-db.js';

/**
 * A replica's first connection to PostgreSQL (issue 53): started while the server or its pooler is
 * still coming back, it waits that out instead of exiting 2 for a process manager to restart it.
 * Only failures that end on their own are waited for; a wrong password, an unknown database or a
 * host name that does not resolve fail at once, as before.
 */

/** Network errors of a server that is down, restarting or not reachable yet. */
const TRANSIENT_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  'ENETDOWN',
  'EPIPE',
  'EAI_AGAIN', // a name server not answering yet, unlike ENOTFOUND
  '08000', // connection_exception
  '08003', // connection_does_not_exist
  '08006', // connection_failure
  '57P01', // admin_shutdown: the server is stopping
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now: "the database system is starting up", "… shutting down", "… in recovery mode"
  '53300', // too_many_connections: "sorry, too many clients already"
]);

/**
 * What PgBouncer (its errors come as SQLSTATE 08P01, whatever the cause) and pg say for a server
 * that is not there yet: PgBouncer's fast-fail after a failed server login, its client limit, its
 * own wait for a server; pg's connection closed during the start-up exchange (or under a query), or a
 * client whose connection already failed.
 */
const TRANSIENT_MESSAGES =
  /server login has been failing|no more connections allowed|pgbouncer cannot connect to server|query_wait_timeout|server conn crashed|database system is (starting up|shutting down|not yet accepting)|connection terminated unexpectedly|connection error and is not queryable/i;

/** True when `err` (pg's error, or a `PgConnectFailure` around one) is a server not reachable yet rather than a wrong URL or credentials. */
export function isTransientConnectError(err: unknown): boolean {
  const e = (err instanceof PgConnectFailure ? err.underlying : err) as (Error & { code?: string; errors?: unknown[] }) | null | undefined;
  if (!e || typeof e !== 'object') return false;
  if (e.code && TRANSIENT_CODES.has(e.code)) return true;
  // Node reports a failed dual-stack connect as an AggregateError: transient when every address was.
  if (!e.message && Array.isArray(e.errors) && e.errors.length) return e.errors.every(isTransientConnectError);
  return PG_TIMEOUT.test(e.message ?? '') || TRANSIENT_MESSAGES.test(e.message ?? '');
}

export interface StartupWait {
  /** How long after the first attempt a new one may still start (`database.startup_wait`); 0: one attempt. */
  waitMs: number;
  /** A stop signal: no further attempt starts. */
  signal?: AbortSignal;
  /** Before each pause: the failed attempt (1-based), why (one line, no secret), the pause and the time since the first attempt. */
  onRetry?: (r: { attempt: number; reason: string; retryInMs: number; elapsedMs: number }) => void;
}

/** Backoff between attempts: 250 ms doubling to 5 s, up to a fifth taken off at random (replicas restarted together spread out). */
function pauseMs(attempt: number): number {
  const raw = Math.min(5000, 250 * 2 ** Math.min(attempt - 1, 10));
  return Math.round(raw * (1 - 0.2 * Math.random()));
}

/** Why an attempt failed, as the user reads it: the connect error's message without its "cannot connect to … :" head. */
function reasonOf(err: unknown): string {
  const m = (err as Error).message;
  const i = m.indexOf('): ');
  return err instanceof PgConnectFailure && i >= 0 ? m.slice(i + 3) : m;
}

/**
 * `PgDb.connect`, tried again while the failure is transient, until `waitMs` after the first
 * attempt (each attempt bounded by `connectTimeoutMs`). A permanent failure is thrown at once; the
 * last transient one, after the bound, says how long it was tried and which key bounds it.
 */
export async function connectWhenReady(opts: PgDbOptions, wait: StartupWait): Promise<PgDb> {
  const started = monotonic();
  for (let attempt = 1; ; attempt++) {
    try {
      return await PgDb.connect(opts);
    } catch (err) {
      if (!isTransientConnectError(err) || wait.signal?.aborted) throw err;
      const elapsedMs = monotonic() - started;
      const leftMs = wait.waitMs - elapsedMs;
      if (leftMs <= 0) {
        if (attempt === 1) throw err; // no wait configured (database.startup_wait 0)
        throw new PgConnectFailure(
          `${(err as Error).message}; still failing after ${attempt} attempts in ${seconds(elapsedMs)} s (database.startup_wait ${seconds(wait.waitMs)} s)`,
          (err as PgConnectFailure).underlying,
        );
      }
      const retryInMs = Math.min(pauseMs(attempt), leftMs);
      wait.onRetry?.({ attempt, reason: reasonOf(err), retryInMs, elapsedMs });
      if (!(await delay(retryInMs, { signal: wait.signal }))) throw err;
    }
  }
}

const seconds = (ms: number) => Math.round(ms / 100) / 10;

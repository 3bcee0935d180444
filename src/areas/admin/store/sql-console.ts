import { join } from 'node:path';
import type { Config } from '../../../config/load.js';
import type { Db, PinnedConnection, Queryable } from '../../../store/db.js';
import { PgDb } from '../../../store/pg-db.js';
import { pgliteSettings } from '../../../store/pglite-db.js';
import { classifyStatement, SqlRefused, SqlUnavailable, type ClassifiedStatement } from './sql-guard.js';
import { SqlSnapshot, SqlTimeout, type SnapshotSource } from './sql-snapshot.js';
import { consoleDatabaseUrl, inspectConsoleRole, refusalReasons } from './console-role.js';
import { interval, timeout, type Cancel } from '../../../time/wall.js';

export { SqlRefused, SqlUnavailable, SqlTimeout };

export interface SqlResult {
  columns: string[];
  rows: Array<Record<string, unknown>>;
  /** The reply stops short of the statement's result: at `sql.max_rows` rows or `sql.max_reply_bytes` bytes (`cut` says which). */
  truncated: boolean;
  /** Why and where the reply was cut; null when it is the whole result. */
  cut: { reason: 'rows' | 'bytes'; limit: number } | null;
}

export interface SqlConsoleOptions {
  /** `sql.statement_timeout`: every statement's own `SET LOCAL statement_timeout`. */
  statementTimeoutMs: number;
  /** More rows than this are cut (and said to be); the console is for looking, not exporting. */
  maxRows: number;
  /** Statements at once; more are refused (busy) rather than queued behind a slow one. */
  concurrency: number;
  /** `sql.max_reply_bytes` (default 4 MiB): the rows' values (their text form) at most; the server sends NULLs past it, so nothing larger reaches memory. */
  maxReplyBytes?: number;
  /** How often a running statement checks whether it holds a lock someone waits for (then it is cancelled); 0: never. */
  yieldCheckMs?: number;
}

/**
 * A console statement waits at most this long for a lock (`SET LOCAL lock_timeout`): behind DDL
 * that waits for the gateway's tables it gives up (409 `sql_locked`) instead of queueing there.
 */
export const CONSOLE_LOCK_TIMEOUT_MS = 1000;
const DEFAULT_MAX_REPLY_BYTES = 4 * 1024 * 1024;
/** How often a running cluster statement looks for sessions waiting on a lock it holds. */
const YIELD_CHECK_MS = 200;
/** The running byte count of a reply: a transaction-local setting the wrapped statement adds each row's size to. */
const BYTES_SETTING = 'relay_jobs.reply_bytes';
/** The extra column carrying that running count; stripped before the reply. */
export const BYTES_COLUMN = 'relay_jobs_reply_bytes';

/** A snapshot thread's JavaScript heap: 1,001 rows of a wide table fit; a row set past it ends the thread, not the service. */
const SNAPSHOT_HEAP_MB = 256;
/** A snapshot's buffer pool: console statements read a copy, and PGlite touches the whole pool at every open. */
const SNAPSHOT_SHARED_BUFFERS_MB = 16;
/** A PGlite open takes 8-14 s quiet and over a minute at load average 30 on two cores (vitest.config.ts). */
const SNAPSHOT_LOAD_TIMEOUT_MS = 180_000;

const CURSOR = 'relay_jobs_sql_console';

/**
 * The console for a configuration: embedded mode reads a snapshot of the service's PGlite in a
 * thread of its own (sql-snapshot.ts, `<data_dir>/sql-snapshots`); cluster mode gets a pool of its
 * own under `sql.database_url` (else DATABASE_URL, which the role check refuses when it is a
 * superuser), so a slow statement never takes the service's connections. `close()` ends that pool
 * or terminates the snapshot thread (and leaves the service's own database open).
 */
/** The embedded console's snapshot of `db` (a PgliteDb with a data directory), copies kept in `dir`; `now`: the clock of its age (default monotonic). */
export function openSnapshot(db: SnapshotSource, dir: string, maxAgeMs: number, now?: () => number): SqlSnapshot {
  return new SqlSnapshot(db, { dir, maxAgeMs, loadTimeoutMs: SNAPSHOT_LOAD_TIMEOUT_MS, heapMb: SNAPSHOT_HEAP_MB, pgSettings: pgliteSettings(SNAPSHOT_SHARED_BUFFERS_MB), now });
}

export function openSqlConsole(config: Config, db: Db): { console: SqlConsole; close: () => Promise<void> } {
  const opts = { statementTimeoutMs: config.sql.statement_timeout, maxRows: config.sql.max_rows, concurrency: config.sql.concurrency, maxReplyBytes: config.sql.max_reply_bytes };
  if (db.kind === 'pglite') {
    const snapshot = openSnapshot(db as Db & SnapshotSource, join(config.database.data_dir, 'sql-snapshots'), config.sql.embedded_snapshot_max_age);
    return { console: new SqlConsole(db, opts, snapshot), close: () => snapshot.close() };
  }
  // One connection more than the statements: the one that watches them for locks others wait on.
  const own = new PgDb({ ...consoleDatabaseUrl(config), poolSize: config.sql.concurrency + 1, connectTimeoutMs: config.database.connect_timeout });
  return { console: new SqlConsole(own, opts), close: () => own.close() };
}

/**
 * The read-only SQL console behind `POST /api/v1/sql` and `relay-jobs sql`. Its guarantees:
 * - only what sql-guard.ts lets through (PostgreSQL's parser, one read-only statement, no denied function);
 * - each statement in its own READ ONLY transaction with SET LOCAL settings only, rolled back;
 * - rows read through a cursor, FETCH stops at maxRows + 1, so memory is flat whatever the query;
 * - cluster mode: a connection of its own (`sql.database_url`, a role without superuser or file
 *   rights, refused otherwise), destroyed after every statement, so nothing a statement did to its
 *   session reaches another; at most `concurrency` at once, so the service's pool is never touched;
 * - embedded mode: PGlite's timeout cannot interrupt a statement, so statements run on a snapshot
 *   in a thread of their own (sql-snapshot.ts), terminated at the timeout and at shutdown; the
 *   service's event loop and data directory are never theirs.
 */
export class SqlConsole {
  private running = 0;
  private readonly opts: SqlConsoleOptions & { maxReplyBytes: number };

  constructor(
    private readonly db: Db,
    opts: SqlConsoleOptions,
    /** Embedded mode: where statements run (never on `db` itself). */
    private readonly snapshot?: SqlSnapshot,
  ) {
    this.opts = { ...opts, maxReplyBytes: opts.maxReplyBytes ?? DEFAULT_MAX_REPLY_BYTES };
    if (db.kind === 'pglite' && !snapshot) throw new Error('an embedded SQL console runs on a snapshot (openSqlConsole)');
  }

  async run(text: string): Promise<SqlResult> {
    const stmt = await classifyStatement(text);
    if (this.snapshot) {
      const rows = await this.snapshot.run({ kind: stmt.kind, text: stmt.text, maxRows: this.opts.maxRows, maxBytes: this.opts.maxReplyBytes, timeoutMs: this.opts.statementTimeoutMs });
      return shape(rows, this.opts);
    }
    if (this.running >= this.opts.concurrency)
      throw new SqlUnavailable(`the SQL console is running ${this.running} statements already (at most ${this.opts.concurrency}); retry when one is done`, 'busy');
    this.running++;
    try {
      return await this.onOwnConnection(stmt);
    } finally {
      this.running--;
    }
  }

  /** A dedicated connection, destroyed afterwards whatever happened; a watchdog destroys it if the server's own timeout does not answer. */
  private async onOwnConnection(stmt: ClassifiedStatement): Promise<SqlResult> {
    // The pool connects lazily: its first statement is where an unreachable sql.database_url shows, named with its source.
    const conn = await this.db.pin().catch((err: unknown) => {
      throw this.db instanceof PgDb ? new SqlUnavailable(this.db.connectFailure(err).message, 'unavailable') : err;
    });
    let destroyed = false;
    let cutByWatchdog = false;
    let gaveWay: string | null = null;
    let stopYieldChecks: Cancel | undefined;
    const destroy = () => {
      if (destroyed) return;
      destroyed = true;
      conn.release(true);
    };
    // Real time: it bounds a connection to the server, whatever clock the service runs on.
    const cancelWatchdog = timeout(() => {
      cutByWatchdog = true;
      destroy();
    }, this.opts.statementTimeoutMs + 2000);
    try {
      await conn.query('BEGIN READ ONLY');
      const pid = await assertSafeRole(conn);
      const every = this.opts.yieldCheckMs ?? YIELD_CHECK_MS;
      if (every > 0) stopYieldChecks = this.watchForWaiters(pid, every, (what) => (gaveWay = what));
      return await this.execute(conn, stmt);
    } catch (err) {
      // The watchdog closed the connection: the caller sees the timeout, not "Connection terminated".
      if (cutByWatchdog) throw new SqlTimeout(`the statement ran longer than sql.statement_timeout (${this.opts.statementTimeoutMs} ms) and its connection was closed`);
      if (gaveWay) throw new SqlUnavailable(`the statement was cancelled: it held a lock that ${gaveWay} waited for (the console gives way to the service's writes and DDL); retry`, 'locked');
      if ((err as { code?: string }).code === '55P03')
        throw new SqlUnavailable(`the statement waited more than ${CONSOLE_LOCK_TIMEOUT_MS} ms for a lock (a table being altered) and gave up; retry`, 'locked');
      throw err;
    } finally {
      cancelWatchdog();
      stopYieldChecks?.();
      if (!destroyed) await conn.query('ROLLBACK').catch(() => undefined);
      destroy();
    }
  }

  /**
   * While a statement runs, its backend may hold ACCESS SHARE on a table whose DDL (the usage
   * writer's partitions) then waits, with every insert queued behind that DDL. The console gives
   * way: a session waiting on a lock this backend holds cancels the statement at the next check.
   * From the console's own pool (same role, so pg_cancel_backend is allowed); one check at a time.
   */
  private watchForWaiters(pid: number, every: number, onYield: (what: string) => void): Cancel {
    let checking = false;
    const cancel = interval(
      () => {
        if (checking) return;
        checking = true;
        void this.db
          .query<{ what: string | null }>(WAITERS, [pid])
          .then(async ({ rows }) => {
            const what = rows[0]?.what;
            if (!what) return;
            cancel();
            onYield(what);
            await this.db.query('SELECT pg_cancel_backend($1)', [pid]);
          })
          .catch(() => undefined)
          .finally(() => (checking = false));
      },
      every,
      { unref: true },
    );
    return cancel;
  }

  private async execute(q: Queryable, stmt: ClassifiedStatement): Promise<SqlResult> {
    const ms = Math.max(1, Math.round(this.opts.statementTimeoutMs));
    await q.query('SET TRANSACTION READ ONLY');
    await q.query(`SET LOCAL statement_timeout = ${ms}`);
    await q.query(`SET LOCAL lock_timeout = ${Math.min(ms, CONSOLE_LOCK_TIMEOUT_MS)}`);
    await q.query(`SET LOCAL idle_in_transaction_session_timeout = ${ms + 1000}`);
    if (stmt.kind !== 'query') {
      // EXPLAIN (without ANALYZE) and SHOW return a plan or settings: small, and they cannot be declared as a cursor.
      const { rows } = await q.query<Record<string, unknown>>(stmt.text);
      return shape(rows, this.opts);
    }
    await q.query(`SET LOCAL ${BYTES_SETTING} = 0`);
    await q.query(`DECLARE ${CURSOR} NO SCROLL CURSOR FOR ${boundedByBytes(stmt.text, this.opts.maxReplyBytes)}`);
    const { rows } = await q.query<Record<string, unknown>>(`FETCH FORWARD ${this.opts.maxRows + 1} FROM ${CURSOR}`);
    await q.query(`CLOSE ${CURSOR}`);
    return shape(rows, this.opts);
  }
}

/** The first lock another session waits for that `$1` holds (relation and mode), or null. */
const WAITERS = `SELECT coalesce(w.relation::regclass::text, w.locktype) || ' (' || w.mode || ', session ' || w.pid || ')' AS what
   FROM pg_locks w WHERE NOT w.granted AND $1 = ANY (pg_blocking_pids(w.pid)) LIMIT 1`;

/**
 * Cluster mode's byte bound. node-postgres holds a whole row before it hands it over, so the bound
 * must act on the server: each row's size (its text form, what the wire carries) is added to a
 * transaction-local running count as the cursor produces it, and a row past the bound comes back
 * with every value NULL, only the count left to say where the reply stops. The server still
 * computes a large value (its memory, its statement_timeout); it never sends it.
 * Embedded mode does the same per column (sql-snapshot-worker.js): PGlite's memory is ours.
 */
function boundedByBytes(text: string, maxBytes: number): string {
  const row = 'relay_jobs_row';
  const add = `set_config('${BYTES_SETTING}', (current_setting('${BYTES_SETTING}')::bigint + coalesce(octet_length(${row}::text), 0))::text, true)::bigint`;
  return `SELECT v.*, s.${BYTES_COLUMN} FROM (SELECT ${row}, ${add} AS ${BYTES_COLUMN} FROM (SELECT * FROM (${text}) relay_jobs_q OFFSET 0) ${row}) s
    LEFT JOIN LATERAL (SELECT (s.${row}).*) v ON s.${BYTES_COLUMN} <= ${Math.floor(maxBytes)}`;
}

/**
 * A superuser or a member of the file/program roles can reach the host, and the owner of the
 * service's tables reads every secret column and can change grants: the console will not run as
 * one. Returns the connection's backend pid (the lock watch cancels it by that).
 */
async function assertSafeRole(conn: PinnedConnection): Promise<number> {
  const role = await inspectConsoleRole(conn);
  const reasons = refusalReasons(role);
  if (reasons.length) {
    throw new SqlUnavailable(
      `the SQL console refuses to run as role ${JSON.stringify(role.name)}: ${reasons.join('; ')}; create a read-only role (docs/security.md, "SQL console role") and set sql.database_url (RELAY_JOBS__SQL__DATABASE_URL) to connect as it`,
      'unsafe_role',
    );
  }
  return role.pid;
}

/** The reply: at most maxRows rows, stopping before the first row whose running byte count passes maxReplyBytes. */
function shape(rows: Array<Record<string, unknown>>, opts: { maxRows: number; maxReplyBytes: number }): SqlResult {
  let cut: SqlResult['cut'] = null;
  let end = rows.length;
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!;
    if (!(BYTES_COLUMN in row)) continue;
    const bytes = Number(row[BYTES_COLUMN]);
    delete row[BYTES_COLUMN];
    if (bytes > opts.maxReplyBytes && i < opts.maxRows) {
      end = i;
      cut = { reason: 'bytes', limit: opts.maxReplyBytes };
      break;
    }
  }
  if (!cut && end > opts.maxRows) {
    end = opts.maxRows;
    cut = { reason: 'rows', limit: opts.maxRows };
  }
  const kept = rows.slice(0, end);
  const first = rows[0];
  return { columns: first ? Object.keys(first).filter((c) => c !== BYTES_COLUMN) : [], rows: kept, truncated: cut !== null, cut };
}

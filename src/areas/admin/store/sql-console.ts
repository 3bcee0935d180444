import { join } from 'node:path';
import type { Config } from '../../../config/load.js';
import type { Db, PinnedConnection, Queryable } from '../../../store/db.js';
import { PgDb } from '../../../store/pg-db.js';
import { pgliteSettings } from '../../../store/pglite-db.js';
import { classifyStatement, SqlRefused, SqlUnavailable, type ClassifiedStatement } from './sql-guard.js';
import { SqlSnapshot, SqlTimeout, type SnapshotSource } from './sql-snapshot.js';

export { SqlRefused, SqlUnavailable, SqlTimeout };

export interface SqlResult {
  columns: string[];
  rows: Array<Record<string, unknown>>;
  truncated: boolean;
}

export interface SqlConsoleOptions {
  /** `sql.statement_timeout`: every statement's own `SET LOCAL statement_timeout`. */
  statementTimeoutMs: number;
  /** More rows than this are cut (and said to be); the console is for looking, not exporting. */
  maxRows: number;
  /** Statements at once; more are refused (busy) rather than queued behind a slow one. */
  concurrency: number;
}

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
/** The embedded console's snapshot of `db` (a PgliteDb with a data directory), copies kept in `dir`. */
export function openSnapshot(db: SnapshotSource, dir: string, maxAgeMs: number): SqlSnapshot {
  return new SqlSnapshot(db, { dir, maxAgeMs, loadTimeoutMs: SNAPSHOT_LOAD_TIMEOUT_MS, heapMb: SNAPSHOT_HEAP_MB, pgSettings: pgliteSettings(SNAPSHOT_SHARED_BUFFERS_MB) });
}

export function openSqlConsole(config: Config, db: Db): { console: SqlConsole; close: () => Promise<void> } {
  const opts = { statementTimeoutMs: config.sql.statement_timeout, maxRows: config.sql.max_rows, concurrency: config.sql.concurrency };
  if (db.kind === 'pglite') {
    const snapshot = openSnapshot(db as Db & SnapshotSource, join(config.database.data_dir, 'sql-snapshots'), config.sql.embedded_snapshot_max_age);
    return { console: new SqlConsole(db, opts, snapshot), close: () => snapshot.close() };
  }
  const own = new PgDb({ url: config.sql.database_url ?? config.database.url!, poolSize: config.sql.concurrency, connectTimeoutMs: config.database.connect_timeout });
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

  constructor(
    private readonly db: Db,
    private readonly opts: SqlConsoleOptions,
    /** Embedded mode: where statements run (never on `db` itself). */
    private readonly snapshot?: SqlSnapshot,
  ) {
    if (db.kind === 'pglite' && !snapshot) throw new Error('an embedded SQL console runs on a snapshot (openSqlConsole)');
  }

  async run(text: string): Promise<SqlResult> {
    const stmt = await classifyStatement(text);
    if (this.snapshot) {
      const rows = await this.snapshot.run({ kind: stmt.kind, text: stmt.text, maxRows: this.opts.maxRows, timeoutMs: this.opts.statementTimeoutMs });
      return shape(rows, this.opts.maxRows);
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
    const conn = await this.db.pin();
    let destroyed = false;
    let cutByWatchdog = false;
    const destroy = () => {
      if (destroyed) return;
      destroyed = true;
      conn.release(true);
    };
    const watchdog = setTimeout(() => {
      cutByWatchdog = true;
      destroy();
    }, this.opts.statementTimeoutMs + 2000);
    try {
      await conn.query('BEGIN READ ONLY');
      await assertSafeRole(conn);
      return await this.execute(conn, stmt);
    } catch (err) {
      // The watchdog closed the connection: the caller sees the timeout, not "Connection terminated".
      if (cutByWatchdog) throw new SqlTimeout(`the statement ran longer than sql.statement_timeout (${this.opts.statementTimeoutMs} ms) and its connection was closed`);
      throw err;
    } finally {
      clearTimeout(watchdog);
      if (!destroyed) await conn.query('ROLLBACK').catch(() => undefined);
      destroy();
    }
  }

  private async execute(q: Queryable, stmt: ClassifiedStatement): Promise<SqlResult> {
    const ms = Math.max(1, Math.round(this.opts.statementTimeoutMs));
    await q.query('SET TRANSACTION READ ONLY');
    await q.query(`SET LOCAL statement_timeout = ${ms}`);
    await q.query(`SET LOCAL lock_timeout = ${ms}`);
    await q.query(`SET LOCAL idle_in_transaction_session_timeout = ${ms + 1000}`);
    if (stmt.kind !== 'query') {
      // EXPLAIN (without ANALYZE) and SHOW return a plan or settings: small, and they cannot be declared as a cursor.
      const { rows } = await q.query<Record<string, unknown>>(stmt.text);
      return shape(rows, this.opts.maxRows);
    }
    await q.query(`DECLARE ${CURSOR} NO SCROLL CURSOR FOR ${stmt.text}`);
    const { rows } = await q.query<Record<string, unknown>>(`FETCH FORWARD ${this.opts.maxRows + 1} FROM ${CURSOR}`);
    await q.query(`CLOSE ${CURSOR}`);
    return shape(rows, this.opts.maxRows);
  }
}

const ROLE_SAFETY = `SELECT current_user AS name, r.rolsuper AS super,
        pg_has_role(current_user, 'pg_read_server_files', 'MEMBER') OR pg_has_role(current_user, 'pg_write_server_files', 'MEMBER')
          OR pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER') AS files
   FROM pg_roles r WHERE r.rolname = current_user`;

export interface ConsoleRole {
  name: string;
  /** Superuser, or a member of the file/program roles: can reach the host, so the console refuses it. */
  unsafe: boolean;
}

/** The role a console connection runs as (also read by the doctor's `sql_console_role` check). */
export async function readConsoleRole(q: Queryable): Promise<ConsoleRole> {
  const { rows } = await q.query<{ name: string; super: boolean; files: boolean }>(ROLE_SAFETY);
  const role = rows[0];
  return { name: role?.name ?? '?', unsafe: !role || role.super || role.files };
}

/** Superuser or a member of the file/program roles can reach the host: the console will not run as one. */
async function assertSafeRole(conn: PinnedConnection): Promise<void> {
  const role = await readConsoleRole(conn);
  if (role.unsafe) {
    throw new SqlUnavailable(
      `the SQL console refuses to run as role ${JSON.stringify(role.name)}: it is a superuser or may read/write server files or run programs; create a read-only role (docs/security.md, "SQL console role") and set sql.database_url (RELAY_JOBS__SQL__DATABASE_URL) to connect as it`,
      'unsafe_role',
    );
  }
}

function shape(rows: Array<Record<string, unknown>>, maxRows: number): SqlResult {
  return { columns: rows[0] ? Object.keys(rows[0]) : [], rows: rows.slice(0, maxRows), truncated: rows.length > maxRows };
}

import pg from 'pg';
import { UserError } from '../config/errors.js';
import { redactUrl, scrubUrlSecrets } from '../config/redact-url.js';
import type { Db, PinnedConnection, Queryable, QueryResult } from './db.js';
import { PreparedStatements } from './prepared-statements.js';

export interface PgDbOptions {
  url: string;
  poolSize: number;
  connectTimeoutMs: number;
  onError?: (err: Error) => void;
  /** Where the URL came from, named in a connection error (default `DATABASE_URL`): `DATABASE_DIRECT_URL`, `sql.database_url`, `--target`… */
  source?: string;
  /** `application_name` of every connection (`relay-jobs/<instance id>`): how the doctor's connection_budget tells them from the gateway's. */
  applicationName?: string;
  /**
   * Name (prepare once per connection) the parametrised statements (`database.prepared_statements`);
   * off by default. `when-direct`: only when `connect` finds the server sees this very connection,
   * not a pooler's or a proxy's (the server's `client_port` of the session is this socket's port).
   */
  preparedStatements?: boolean | 'when-direct';
  /** The server refused a named statement (a pooler in transaction mode): they stay off for this pool. */
  onPreparedRefused?: (reason: string) => void;
}

/** pg's own timeouts: the connection's (`connectionTimeoutMillis`) and the first statement's (`query_timeout`). */
export const PG_TIMEOUT = /connection timeout|timeout exceeded when trying to connect|query read timeout/i;

/** A failed connect as its one-line message; `underlying` is pg's error, for telling a server not up yet from a wrong URL. */
export class PgConnectFailure extends UserError {
  constructor(
    message: string,
    readonly underlying: unknown,
  ) {
    super(message);
  }
}

export class PgDb implements Db {
  readonly kind = 'postgres' as const;
  readonly stats = { queries: 0 };
  private readonly pool: pg.Pool;
  readonly prepared: PreparedStatements;

  constructor(private readonly opts: PgDbOptions) {
    this.prepared = new PreparedStatements(opts.preparedStatements === true, (reason) => opts.onPreparedRefused?.(reason));
    // `min`: an idle replica's few statements come tens of seconds apart, longer than the idle
    // timeout; without a floor every one of them opened a fresh connection, and each connection's
    // start is a transaction of its own that no statement log shows (issue 26: the 0.6/s "gap").
    this.pool = new pg.Pool({
      connectionString: opts.url,
      application_name: opts.applicationName,
      max: opts.poolSize,
      min: Math.min(2, opts.poolSize),
      connectionTimeoutMillis: opts.connectTimeoutMs,
      idleTimeoutMillis: 30_000,
    });
    // An idle client dying (server restart) must not crash the process; the next query reconnects.
    this.pool.on('error', (err) => opts.onError?.(err));
  }

  /** Opens the pool and proves the server answers; a one-line `PgConnectFailure` when it doesn't. */
  static async connect(opts: PgDbOptions): Promise<PgDb> {
    const db = new PgDb(opts);
    try {
      await db.firstPing();
    } catch (err) {
      await db.close().catch(() => undefined);
      throw db.connectFailure(err);
    }
    return db;
  }

  /**
   * `SELECT 1` with its answer bounded by `connectTimeoutMs` as well: behind PgBouncer the login is
   * answered by the pooler itself, and the statement then waits for a server connection (up to its
   * `query_wait_timeout`, 2 minutes by default) while PostgreSQL is down. With `preparedStatements:
   * 'when-direct'` the statement reads the session's client port as well.
   */
  private async firstPing(): Promise<void> {
    const client = await this.pool.connect();
    let failed: Error | undefined;
    const onError = (err: Error) => void (failed ??= err); // a checked-out client's 'error' must not crash the process
    client.on('error', onError);
    try {
      this.stats.queries++;
      const probe = this.opts.preparedStatements === 'when-direct';
      const text = probe ? 'SELECT client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()' : 'SELECT 1';
      const { rows } = await client.query<{ client_port: number | null }>({ text, query_timeout: this.opts.connectTimeoutMs } as pg.QueryConfig); // pg reads a statement's own query_timeout; its types lack it
      if (probe) this.prepared.directOnly(seenDirectly(client, rows[0]?.client_port));
    } catch (err) {
      failed ??= err as Error;
      throw err;
    } finally {
      client.off('error', onError);
      client.release(failed);
    }
  }

  /** A failed connection as one line naming the URL (redacted) and where it came from (`source`); for pools opened lazily, whose first use is the connect. */
  connectFailure(err: unknown): PgConnectFailure {
    const { url, source, connectTimeoutMs } = this.opts;
    // A server that accepts and never speaks (a hung host, a blackholed port) ends in pg's connection timeout: say which bound ended it.
    const why = PG_TIMEOUT.test((err as Error).message)
      ? `no answer within ${connectTimeoutMs / 1000} s (database.connect_timeout): is the server up, and is this its address and port?`
      : describePgError(err);
    return new PgConnectFailure(`cannot connect to PostgreSQL at ${redactUrl(url)} (${source ?? 'DATABASE_URL'}): ${scrubUrlSecrets(why, url)}`, err);
  }

  async query<R>(text: string, params?: unknown[]): Promise<QueryResult<R>> {
    this.stats.queries++;
    const outsideTx = () => true; // a pool query never runs inside a transaction
    const res = await this.prepared.run(text, params, outsideTx, (cfg) => this.pool.query(cfg));
    return { rows: res.rows as R[], rowCount: res.rowCount ?? 0 };
  }

  async exec(sql: string): Promise<void> {
    this.stats.queries++;
    await this.pool.query(sql);
  }

  async tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    // A checked-out client whose server goes away emits 'error' (pg-pool listens only on idle ones):
    // without a listener of ours that kills the process. The statement in flight rejects as well;
    // the broken client is destroyed on release, never handed out again.
    let broken: Error | undefined;
    const onError = (err: Error) => void (broken = err);
    client.on('error', onError);
    const q = wrapClient(client, this.stats, this.prepared);
    try {
      await q.query('BEGIN');
      const result = await fn(q);
      await q.query('COMMIT');
      return result;
    } catch (err) {
      await q.query('ROLLBACK').catch(() => undefined); // after any statement of fn still running
      throw err;
    } finally {
      client.off('error', onError);
      client.release(broken);
    }
  }

  async pin(onClosed?: (err: Error) => void): Promise<PinnedConnection> {
    const client = await this.pool.connect();
    // A pinned client that errors while idle (server restart) must not crash the process.
    // The listeners go with the pin: pool clients are reused, and listeners must not pile up on them.
    let closed = false;
    const lost = (err?: Error) => {
      if (closed) return;
      closed = true;
      onClosed?.(err ?? new Error('connection ended'));
    };
    const onError = (err: Error) => lost(err);
    const onEnd = () => lost();
    client.on('error', onError);
    client.on('end', onEnd);
    const q = wrapClient(client, this.stats, this.prepared);
    const notified: Array<(msg: pg.Notification) => void> = [];
    return {
      query: q.query,
      exec: q.exec,
      onNotification: (fn) => {
        const h = (msg: pg.Notification) => fn(msg.channel, msg.payload ?? '');
        notified.push(h);
        client.on('notification', h);
      },
      release: (destroy?: boolean) => {
        closed = true;
        client.off('error', onError);
        client.off('end', onEnd);
        for (const h of notified.splice(0)) client.off('notification', h);
        client.release(destroy ? true : undefined);
      },
    };
  }

  async ping(): Promise<void> {
    await this.query('SELECT 1');
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

/**
 * One client's queries, one at a time. A client runs one statement at a time anyway; pg queues a
 * second one sent while it is busy, but that queue is deprecated (removed in pg 9), so callers
 * that share a pinned connection (the heartbeat and shutdown on the liveness session) or run
 * statements side by side in a transaction are put in line here, in the order they asked.
 * A statement whose name the server refused is sent again unnamed when the connection is not
 * inside a transaction (`tx`, or a pinned connection's own `BEGIN`: the status of its last reply).
 */
function wrapClient(client: pg.PoolClient, stats: { queries: number }, prepared: PreparedStatements): Queryable {
  const idle = () => (client as unknown as { getTransactionStatus(): string | null }).getTransactionStatus() === 'I';
  let tail: Promise<unknown> = Promise.resolve();
  const inLine = <T>(run: () => Promise<T>): Promise<T> => {
    const next = tail.then(run, run);
    tail = next.catch(() => undefined);
    return next;
  };
  return {
    query<R>(text: string, params?: unknown[]): Promise<QueryResult<R>> {
      stats.queries++;
      return inLine(async () => {
        const res = await prepared.run(text, params, idle, (cfg) => client.query(cfg));
        return { rows: res.rows as R[], rowCount: res.rowCount ?? 0 };
      });
    },
    exec(sql: string): Promise<void> {
      stats.queries++;
      return inLine(async () => void (await client.query(sql)));
    },
  };
}

/**
 * Whether the server's session is this client's own socket: the port it reports for the session
 * (`client_port`) is this TCP socket's local port. Through PgBouncer, or a proxy that opens its own
 * connections, the server sees another port; over a Unix socket there is none to compare.
 */
function seenDirectly(client: pg.PoolClient, serverSeesPort: number | null | undefined): boolean {
  const local = (client as unknown as { connection?: { stream?: { localPort?: number } } }).connection?.stream?.localPort;
  return local !== undefined && serverSeesPort === local; // a Unix socket tells nothing (PgBouncer may listen on one): off
}

export function describePgError(err: unknown): string {
  const e = err as NodeJS.ErrnoException & { message: string };
  if (e.code === 'ECONNREFUSED') return 'connection refused (is the server running and listening there?)';
  if (e.code === 'ENOTFOUND') return 'host not found';
  // PgBouncer relays the server's "does not exist" under its own SQLSTATE (08P01).
  if (e.code === '3D000' || (e.code === '08P01' && /^database "[^"]+" does not exist$/.test(e.message))) {
    // database does not exist: the URL names one that has to be created first
    const name = /database "([^"]+)"/.exec(e.message)?.[1];
    return `${e.message}; create it first, e.g. \`createdb ${name ?? '<name>'}\` or \`psql -c 'CREATE DATABASE ${name ?? '<name>'}'\``;
  }
  if (e.code === '28P01' || e.code === '28000') return `${e.message} (check the user and password in the URL)`;
  if (e.code === 'ETIMEDOUT') return 'no answer (timed out): is the host reachable and the port open?';
  const errors = (err as { errors?: NodeJS.ErrnoException[] }).errors;
  // Node reports a failed dual-stack connect as an AggregateError with an empty message.
  if (!e.message && errors?.length) return errors.map((x) => describePgError(x)).join('; ');
  return (e.message || String(err)).split('\n')[0]!;
}

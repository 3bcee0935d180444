/**
 * The one database interface the rest of the code sees. Two implementations: `PgDb`
 * (a `pg` pool, cluster mode) and `PgliteDb` (PGlite in-process, embedded mode). Both speak
 * the same PostgreSQL dialect, so every repository and every coordination query is one SQL text.
 */
export interface QueryResult<R> {
  rows: R[];
  rowCount: number;
}

export interface Queryable {
  query<R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<QueryResult<R>>;
  /** Runs several statements (migrations); no parameters. */
  exec(sql: string): Promise<void>;
}

/** A connection held for a while (session advisory locks live on one connection). */
export interface PinnedConnection extends Queryable {
  release(destroy?: boolean): void;
  /** NOTIFY messages for the channels this session LISTENs to; the handler goes with the pin. */
  onNotification?(fn: (channel: string, payload: string) => void): void;
}

export interface Db extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  /** Statements sent since creation: the benchmark counts round trips with it. */
  readonly stats: { queries: number };
  tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T>;
  /** A dedicated connection; only the pg pool has them. `onClosed` fires once if the connection drops while pinned. */
  pin(onClosed?: (err: Error) => void): Promise<PinnedConnection>;
  ping(): Promise<void>;
  close(): Promise<void>;
  /** In-process LISTEN (PGlite, embedded mode); returns the unlisten. The pg pool LISTENs on a pinned session instead. */
  listen?(channel: string, fn: (payload: string) => void): Promise<() => Promise<void>>;
}

/** Numbers come back as strings from `pg` (bigint) and as numbers from PGlite: read them through this. */
export function num(v: unknown): number {
  return v === null || v === undefined ? NaN : Number(v);
}

export function toDate(v: unknown): Date | null {
  if (v === null || v === undefined) return null;
  return v instanceof Date ? v : new Date(String(v));
}

/** A timestamp column as ISO text for API views, null stays null. */
export function iso(v: unknown): string | null {
  return toDate(v)?.toISOString() ?? null;
}

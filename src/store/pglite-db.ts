import { existsSync, mkdirSync } from 'node:fs';
import { cp } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import { EMBEDDED_SHARED_BUFFERS_MB } from '../config/schema.js';
import type { Db, PinnedConnection, Queryable, QueryResult } from './db.js';

/**
 * PostgreSQL settings PGlite starts with, on top of its own start parameters. `shared_buffers`:
 * PGlite touches its whole buffer pool at every open: at PostgreSQL's 128 MB default an open cost
 * twice the CPU and three times the page faults of one at 32 MB, and an embedded start 110 MiB more
 * memory (bench/startup.ts, docs/benchmarks.md).
 * PGlite reads its files through Node.js, so pages outside the pool still come from the OS cache.
 */
export function pgliteSettings(sharedBuffersMb: number): string[] {
  return ['-c', `shared_buffers=${sharedBuffersMb}MB`];
}

/**
 * Embedded PostgreSQL (PGlite, WASM) in `<data_dir>/pgdata`, or in memory when no directory is
 * given (tests). One connection: PGlite serialises statements and transactions itself.
 */
export class PgliteDb implements Db {
  readonly kind = 'pglite' as const;
  readonly stats = { queries: 0 };

  private constructor(
    private readonly pg: PGlite,
    /** `<data_dir>/pgdata`, or undefined in memory. */
    readonly path?: string,
  ) {}

  /** Whether a data directory already holds a database (a new one takes seconds to create). */
  static exists(dataDir: string): boolean {
    return existsSync(join(dataDir, 'pgdata', 'PG_VERSION'));
  }

  /** `loadDataDir`: a PGlite data-directory dump to unpack into the (empty) directory first (a restore). */
  static async open(dataDir?: string, opts: { sharedBuffersMb?: number; loadDataDir?: Blob } = {}): Promise<PgliteDb> {
    let path: string | undefined;
    if (dataDir) {
      path = join(dataDir, 'pgdata');
      mkdirSync(path, { recursive: true, mode: 0o700 });
    }
    // Imported here, not at the top: a cluster-mode replica never loads PGlite's ~500 KB of JavaScript.
    const { PGlite } = await import('@electric-sql/pglite');
    const pg = new PGlite(path, {
      startParams: [...PGlite.defaultStartParams, ...pgliteSettings(opts.sharedBuffersMb ?? EMBEDDED_SHARED_BUFFERS_MB)],
      ...(opts.loadDataDir ? { loadDataDir: opts.loadDataDir } : {}),
    });
    await pg.waitReady;
    return new PgliteDb(pg, path);
  }

  /** PGlite's own data-directory dump (an uncompressed tar), the embedded mode's backup format. */
  dumpDataDir(): Promise<Blob> {
    return this.pg.dumpDataDir('none');
  }

  /**
   * Copies the data directory to `dest` while PGlite's query mutex is held, so no statement writes
   * meanwhile: the copy is what a crash at that moment would leave, and PGlite recovers it when it
   * opens. The copy runs on libuv's threads: the event loop stays free, statements wait for it.
   */
  copyDataDir(dest: string): Promise<void> {
    const src = this.path;
    if (!src) return Promise.reject(new Error('an in-memory PGlite has no data directory to copy'));
    return this.pg._runExclusiveQuery(() => cp(src, dest, { recursive: true, filter: (p) => basename(p) !== 'postmaster.pid' }));
  }

  async query<R>(text: string, params?: unknown[]): Promise<QueryResult<R>> {
    this.stats.queries++;
    const res = await this.pg.query<R>(text, params as unknown[]);
    return { rows: res.rows, rowCount: res.affectedRows ?? res.rows.length };
  }

  async exec(sql: string): Promise<void> {
    this.stats.queries++;
    await this.pg.exec(sql);
  }

  async tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T> {
    const stats = this.stats;
    return this.pg.transaction(async (t) =>
      fn({
        async query<R>(text: string, params?: unknown[]): Promise<QueryResult<R>> {
          stats.queries++;
          const res = await t.query<R>(text, params as unknown[]);
          return { rows: res.rows, rowCount: res.affectedRows ?? res.rows.length };
        },
        async exec(sql: string): Promise<void> {
          stats.queries++;
          await t.exec(sql);
        },
      }),
    );
  }

  pin(): Promise<PinnedConnection> {
    return Promise.reject(new Error('embedded mode has no pinned connections (in-process locks are used instead)'));
  }

  async listen(channel: string, fn: (payload: string) => void): Promise<() => Promise<void>> {
    return this.pg.listen(channel, fn);
  }

  async ping(): Promise<void> {
    await this.query('SELECT 1');
  }

  async close(): Promise<void> {
    await this.pg.close();
  }
}

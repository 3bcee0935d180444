import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { SqlUnavailable } from './sql-guard.js';
import type { SnapshotReply, SnapshotRequest } from './sql-snapshot-worker.js';
import { monotonic, timeout, type Cancel } from '../../../time/wall.js';

/** Where a snapshot comes from: a copy of the live data directory made under PGlite's query mutex (PgliteDb.copyDataDir). */
export interface SnapshotSource {
  copyDataDir(dest: string): Promise<void>;
}

export interface SqlSnapshotOptions {
  /** Where copies live (`<data_dir>/sql-snapshots`, 0700); emptied on creation: only the data directory's owner uses it. */
  dir: string;
  /** `sql.embedded_snapshot_max_age`: a statement never reads a snapshot older than this; an idle one is dropped then. */
  maxAgeMs: number;
  /** A snapshot that has not opened within this is given up (503), its thread terminated. */
  loadTimeoutMs: number;
  /** The console thread's JavaScript heap (rows it holds before they are sent), in MB. */
  heapMb: number;
  /** PostgreSQL settings the thread's PGlite starts with (`pgliteSettings`, store/pglite-db.ts). */
  pgSettings: string[];
  /** The clock a snapshot's age is read on, in ms (default `monotonic`); a test moves a manual one. */
  now?: () => number;
}

/** A statement cut at its deadline. `code` is PostgreSQL's query_canceled, so it is answered as the server's own timeout is. */
export class SqlTimeout extends Error {
  readonly code = '57014';
}

interface Loaded {
  worker: Worker;
  takenAt: number;
  dir: string;
}

/** The thread's module is plain JavaScript beside this file, built or not. */
function startWorker(workerData: { dir: string; pgSettings: string[] }, heapMb: number): Worker {
  return new Worker(new URL('./sql-snapshot-worker.js', import.meta.url), { workerData, resourceLimits: { maxOldGenerationSizeMb: heapMb } });
}

/**
 * Embedded mode's hard bound on console statements. PGlite runs a statement synchronously on the
 * thread that owns it and its statement_timeout never fires (measured: `pg_sleep(3)` under a 1 s
 * timeout ran 3 s, no timer ran meanwhile), so a statement on the service's own PGlite would hold
 * the event loop as long as it likes. Instead statements run on a copy:
 *
 *   no snapshot / older than maxAge ──copy (libuv threads, PGlite's query mutex held)──▶ thread opens the copy
 *   statement ──▶ thread ──reply──▶ answered       deadline first ──▶ thread terminated (SqlTimeout)
 *   close() (shutdown) ──▶ thread terminated, the statement answered 503
 *
 * Terminating the thread is always safe: it owns a copy, never the live data directory, and the
 * copy is deleted after it. One statement at a time (a second is `busy`): a thread runs one anyway.
 */
export class SqlSnapshot {
  private current: Loaded | null = null;
  private loading: Promise<Loaded> | null = null;
  private busy = false;
  private closed = false;
  private nextId = 1;
  private copies = 0;
  private cancelIdle: Cancel | undefined;
  private readonly deleting = new Set<Promise<void>>();

  private readonly now: () => number;

  constructor(
    private readonly source: SnapshotSource,
    private readonly opts: SqlSnapshotOptions,
  ) {
    this.now = opts.now ?? monotonic;
    mkdirSync(opts.dir, { recursive: true, mode: 0o700 });
    // Copies left by a process that died: nobody else uses them (the data-directory lock).
    for (const name of readdirSync(opts.dir)) rmSync(join(opts.dir, name), { recursive: true, force: true });
  }

  /** The statement's rows (at most `maxRows + 1`), or SqlTimeout at `timeoutMs` after the thread got it. */
  async run(req: Omit<SnapshotRequest, 'id'>): Promise<Array<Record<string, unknown>>> {
    if (this.closed) throw new SqlUnavailable('the SQL console is closed: the service is shutting down', 'unavailable');
    if (this.busy) throw new SqlUnavailable('the embedded SQL console is running a statement already (one at a time); retry when it is done', 'busy');
    this.busy = true;
    try {
      return await this.ask(await this.fresh(), { ...req, id: this.nextId++ });
    } finally {
      this.busy = false;
    }
  }

  /** Terminates the thread (a statement in it is answered 503); nothing runs after this resolves. */
  async close(): Promise<void> {
    this.closed = true;
    this.cancelIdle?.();
    await this.retire();
    await Promise.all(this.deleting);
  }

  private async fresh(): Promise<Loaded> {
    if (this.current && this.now() - this.current.takenAt <= this.opts.maxAgeMs) return this.current;
    await this.retire();
    this.loading ??= this.load().finally(() => (this.loading = null));
    return this.loading;
  }

  private async load(): Promise<Loaded> {
    const dir = join(this.opts.dir, `snap-${process.pid}-${++this.copies}`);
    try {
      await this.source.copyDataDir(dir);
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    // Nothing wrote while the copy was made (the mutex), so it is the database as of now.
    const takenAt = this.now();
    if (this.closed) {
      await rm(dir, { recursive: true, force: true });
      throw new SqlUnavailable('the SQL console is closed: the service is shutting down', 'unavailable');
    }
    const worker = startWorker({ dir, pgSettings: this.opts.pgSettings }, this.opts.heapMb);
    // Never what keeps the process alive: shutdown does not wait for a statement.
    worker.unref();
    const loaded = { worker, takenAt, dir };
    this.current = loaded;
    try {
      await this.reply(
        worker,
        (m) => 'type' in m,
        this.opts.loadTimeoutMs,
        () => new SqlUnavailable(`the SQL console's snapshot did not open within ${this.opts.loadTimeoutMs} ms; retry`, 'unavailable'),
      ).then((m) => {
        if ('type' in m && m.type === 'failed') throw new SqlUnavailable(`the SQL console's snapshot could not be opened: ${m.message}`, 'unavailable');
      });
    } catch (err) {
      await this.retire();
      throw err;
    }
    this.cancelIdle?.();
    // An idle snapshot holds a copy of the database in memory: drop it once it is too old to be read.
    this.cancelIdle = timeout(() => void (this.busy || this.current !== loaded ? undefined : this.retire()), this.opts.maxAgeMs, { unref: true });
    return loaded;
  }

  private async ask(snap: Loaded, req: SnapshotRequest): Promise<Array<Record<string, unknown>>> {
    snap.worker.postMessage(req);
    let m: SnapshotReply;
    try {
      m = await this.reply(
        snap.worker,
        (r) => 'id' in r && r.id === req.id,
        req.timeoutMs,
        () => new SqlTimeout(`the statement ran longer than sql.statement_timeout (${req.timeoutMs} ms) and its thread was stopped`),
      );
    } catch (err) {
      // The thread is gone before the answer: nothing of the statement runs after it.
      if (err instanceof SqlTimeout) await this.retire();
      throw err;
    }
    if (!('id' in m)) throw new Error('unexpected reply from the SQL console thread');
    if (m.ok) return m.rows;
    throw Object.assign(new Error(m.message), { code: m.code });
  }

  /** The first message `match` accepts; the deadline's error (after `onDeadline`) or the thread's end otherwise. */
  private reply(worker: Worker, match: (m: SnapshotReply) => boolean, ms: number, onDeadline: () => Error): Promise<SnapshotReply> {
    return new Promise((resolve, reject) => {
      const done = () => {
        cancelTimer();
        worker.off('message', onMessage).off('exit', onExit).off('error', onError);
      };
      const onMessage = (m: SnapshotReply) => {
        if (!match(m)) return;
        done();
        resolve(m);
      };
      const onExit = (code: number) => {
        done();
        if (this.current?.worker === worker) void this.retire();
        reject(this.closed ? new SqlUnavailable('the SQL console was stopped: the service is shutting down', 'unavailable') : new Error(`the SQL console's thread stopped (exit code ${code})`));
      };
      const onError = (err: Error) => {
        done();
        void this.retire();
        reject(new Error(`the SQL console's thread failed: ${err.message}`));
      };
      const cancelTimer = timeout(() => {
        done();
        reject(onDeadline());
      }, ms);
      worker.on('message', onMessage).on('exit', onExit).on('error', onError);
    });
  }

  /** Resolves once the thread is gone; its copy is deleted after (close() waits for that too). */
  private async retire(): Promise<void> {
    const snap = this.current;
    this.current = null;
    if (!snap) return;
    await snap.worker.terminate();
    const deleting = rm(snap.dir, { recursive: true, force: true }).catch(() => undefined);
    this.deleting.add(deleting);
    void deleting.finally(() => this.deleting.delete(deleting));
  }
}

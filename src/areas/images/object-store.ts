import { mkdir, open as openFile, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import type { Readable } from 'node:stream';
import { AppError } from '../../errors/app-error.js';

/** One stored object as a listing shows it. */
export interface StoredObject {
  key: string;
  size: number;
  modifiedMs: number;
}

/**
 * Where batch inputs and images live (`image.storage`): `fs` keeps them as files under a
 * directory, `s3` in a bucket (s3-object-store.ts). Keys are relative paths of
 * `[A-Za-z0-9._-]` segments. Reads are streamed (`open`): an object is never held whole on the
 * way to a client. A missing object is `null`; a store that cannot be reached or written is an
 * `ObjectStoreUnavailable`, never a missing object (a 404 would tell a customer their paid image
 * is gone when it is only out of reach).
 */
export interface ObjectStore {
  readonly kind: 'fs' | 's3';
  /** Where a key is, for messages (`/dir/key`, `s3://bucket/prefix/key`). */
  location(key: string): string;
  put(key: string, data: Buffer | string): Promise<void>;
  /** The whole object: for small objects only (tests, the doctor's probe). */
  get(key: string): Promise<Buffer | null>;
  /** The object as a stream and its size, or null when there is none. */
  open(key: string): Promise<{ stream: Readable; size: number } | null>;
  /** Deletes every object under the prefix (`a/b/` deletes `a/b/*`; a key deletes that object). */
  deletePrefix(prefix: string): Promise<void>;
  deleteKeys(keys: string[]): Promise<void>;
  /** The objects under a prefix, a page at a time (never the whole listing in memory). */
  list(prefix: string): AsyncIterable<StoredObject[]>;
  /** Reachable, the bucket (or directory) present, writable: writes, reads back and deletes `probeKey`. */
  check(probeKey: string): Promise<void>;
  close(): void;
}

/** The object store could not be reached, read or written: a clear 503, never a 404 or a crash. */
export class ObjectStoreUnavailable extends AppError {
  constructor(message: string) {
    super('unavailable', 'object_store_unavailable', message);
  }
}

const KEY = /^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*\/?$/;
const PAGE = 1000;

export class FsObjectStore implements ObjectStore {
  readonly kind = 'fs' as const;
  readonly root: string;
  constructor(root: string) {
    this.root = resolve(root);
  }

  private path(key: string): string {
    if (!KEY.test(key) || key.split('/').some((s) => s === '..' || s === '.')) throw new Error(`object key ${JSON.stringify(key)} is not a plain relative path`);
    const p = resolve(this.root, key);
    if (!p.startsWith(this.root + sep)) throw new Error(`object key ${JSON.stringify(key)} leaves the store`);
    return p;
  }

  private unavailable(what: string, key: string, err: unknown): ObjectStoreUnavailable {
    return new ObjectStoreUnavailable(`image store ${what} ${this.location(key)} failed: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }

  location(key: string): string {
    return join(this.root, key);
  }

  async put(key: string, data: Buffer | string): Promise<void> {
    const p = this.path(key);
    try {
      await mkdir(dirname(p), { recursive: true, mode: 0o700 });
      // Written aside and renamed: a reader (another replica on a shared volume) never sees half an image.
      await writeFile(`${p}.partial`, data, { mode: 0o600 });
      await rename(`${p}.partial`, p);
    } catch (err) {
      throw this.unavailable('write of', key, err);
    }
  }

  async get(key: string): Promise<Buffer | null> {
    try {
      return await readFile(this.path(key));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw this.unavailable('read of', key, err);
    }
  }

  async open(key: string): Promise<{ stream: Readable; size: number } | null> {
    const p = this.path(key);
    try {
      // Opened first, so the size and the stream are of the same file even if it is replaced meanwhile.
      const fh = await openFile(p, 'r');
      const { size } = await fh.stat();
      return { stream: fh.createReadStream({ highWaterMark: 1 << 16 }), size };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw this.unavailable('read of', key, err);
    }
  }

  async deletePrefix(prefix: string): Promise<void> {
    try {
      await rm(this.path(prefix.replace(/\/$/, '')), { recursive: true, force: true });
    } catch (err) {
      throw this.unavailable('delete of', prefix, err);
    }
  }

  async deleteKeys(keys: string[]): Promise<void> {
    for (const k of keys) await this.deletePrefix(k);
  }

  async *list(prefix: string): AsyncIterable<StoredObject[]> {
    let page: StoredObject[] = [];
    for await (const o of this.walk(prefix.replace(/\/$/, ''))) {
      page.push(o);
      if (page.length >= PAGE) {
        yield page;
        page = [];
      }
    }
    if (page.length) yield page;
  }

  private async *walk(rel: string): AsyncGenerator<StoredObject> {
    let names: string[];
    try {
      names = await readdir(this.path(rel));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return;
      throw this.unavailable('listing of', rel, err);
    }
    for (const n of names.sort()) {
      const key = `${rel}/${n}`;
      const s = await stat(this.path(key)).catch(() => null);
      if (s?.isDirectory()) yield* this.walk(key);
      else if (s?.isFile()) yield { key, size: s.size, modifiedMs: s.mtimeMs };
    }
  }

  async check(probeKey: string): Promise<void> {
    await this.put(probeKey, 'relay-jobs image store probe');
    if (!(await this.get(probeKey))) throw new ObjectStoreUnavailable(`image store ${this.location(probeKey)}: a probe written was not found on reading it back`);
    await this.deletePrefix(probeKey);
  }

  close(): void {}
}

export function fsStoreUnder(dataDir: string): FsObjectStore {
  return new FsObjectStore(join(dataDir, 'objects'));
}

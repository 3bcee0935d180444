import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';

/**
 * Where batch outputs live. `fs` keeps objects as files under a directory; an S3 store can
 * implement the same four operations. Keys are relative paths of `[A-Za-z0-9._-]` segments.
 */
export interface ObjectStore {
  readonly kind: string;
  put(key: string, data: Buffer | string): Promise<void>;
  get(key: string): Promise<Buffer | null>;
  /** Deletes every object under the prefix (`a/b/` deletes `a/b/*`). */
  deletePrefix(prefix: string): Promise<void>;
}

const KEY = /^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*\/?$/;

export class FsObjectStore implements ObjectStore {
  readonly kind = 'fs';
  constructor(private readonly root: string) {}

  private path(key: string): string {
    if (!KEY.test(key) || key.split('/').some((s) => s === '..' || s === '.')) throw new Error(`object key ${JSON.stringify(key)} is not a plain relative path`);
    const p = resolve(this.root, key);
    if (!p.startsWith(resolve(this.root) + sep)) throw new Error(`object key ${JSON.stringify(key)} leaves the store`);
    return p;
  }

  async put(key: string, data: Buffer | string): Promise<void> {
    const p = this.path(key);
    await mkdir(dirname(p), { recursive: true, mode: 0o700 });
    // Write then rename would be atomic; a half-written image is simply rewritten by the next indexing attempt.
    await writeFile(p, data, { mode: 0o600 });
  }

  async get(key: string): Promise<Buffer | null> {
    try {
      return await readFile(this.path(key));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  async deletePrefix(prefix: string): Promise<void> {
    await rm(this.path(prefix.replace(/\/$/, '')), { recursive: true, force: true });
  }
}

export function fsStoreUnder(dataDir: string): FsObjectStore {
  return new FsObjectStore(join(dataDir, 'objects'));
}

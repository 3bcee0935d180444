import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat, writeFile, readFile, access, constants } from 'node:fs/promises';
import { dirname, resolve, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import { UserError } from '../../config/errors.js';

/**
 * Where backup objects live. An object appears under its key only once it is complete (a
 * directory: written as `<key>.partial` and renamed; S3: a multipart upload completed), so a
 * reader never sees half a dump under the real name. `remove` deletes an object, its checksum
 * file and anything partial it left (used for retention and for abandoned backups).
 */
export interface BackupStorage {
  readonly kind: 'fs' | 's3';
  /** Where the key is, for records and messages (`/dir/key`, `s3://bucket/key`). */
  location(key: string): string;
  /** Fails with a one-line UserError when the storage cannot be reached or written. */
  check(): Promise<void>;
  put(key: string, body: Readable, signal?: AbortSignal): Promise<void>;
  putText(key: string, text: string): Promise<void>;
  /** The object as a stream and its size; a one-line UserError when it does not exist or cannot be read. */
  open(key: string): Promise<{ stream: Readable; size: number }>;
  readText(key: string): Promise<string | null>;
  remove(key: string): Promise<void>;
}

/** The checksum file next to each dump: `sha256sum -c` reads it. */
export const checksumKey = (key: string) => `${key}.sha256`;

export class FsStorage implements BackupStorage {
  readonly kind = 'fs' as const;
  readonly dir: string;

  constructor(dir: string) {
    this.dir = resolve(dir);
  }

  private path(key: string): string {
    const p = resolve(this.dir, key);
    if (!p.startsWith(this.dir + sep)) throw new UserError(`backup key ${JSON.stringify(key)} escapes backup.dir`);
    return p;
  }

  location(key: string): string {
    return this.path(key);
  }

  async check(): Promise<void> {
    try {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      await access(this.dir, constants.W_OK);
    } catch (err) {
      throw new UserError(`backup.dir ${this.dir} is not a writable directory: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }

  async put(key: string, body: Readable, signal?: AbortSignal): Promise<void> {
    const path = this.path(key);
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const partial = `${path}.partial`;
    try {
      await pipeline(body, createWriteStream(partial, { flags: 'wx', mode: 0o600 }), { signal });
      await rename(partial, path);
    } catch (err) {
      await rm(partial, { force: true });
      throw err;
    }
  }

  async putText(key: string, text: string): Promise<void> {
    const path = this.path(key);
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    await writeFile(`${path}.partial`, text, { mode: 0o600 });
    await rename(`${path}.partial`, path);
  }

  async open(key: string): Promise<{ stream: Readable; size: number }> {
    const path = this.path(key);
    let size: number;
    try {
      size = (await stat(path)).size;
    } catch (err) {
      throw new UserError(`backup file ${path} cannot be read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    return { stream: createReadStream(path, { highWaterMark: 1 << 20 }), size };
  }

  async readText(key: string): Promise<string | null> {
    try {
      return await readFile(this.path(key), 'utf8');
    } catch {
      return null;
    }
  }

  async remove(key: string): Promise<void> {
    const path = this.path(key);
    for (const p of [path, `${path}.partial`, checksumKey(path), `${checksumKey(path)}.partial`]) await rm(p, { force: true });
  }
}

/** A file named on the command line: read-only, the checksum file (if any) next to it. */
export function fileSource(path: string): FsStorage & { key: string } {
  const abs = resolve(path);
  const s = new FsStorage(dirname(abs)) as FsStorage & { key: string };
  s.key = abs.slice(dirname(abs).length + 1);
  return s;
}

import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Writable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { UserError } from '../../config/errors.js';
import { DataDirLock } from '../../store/data-dir-lock.js';
import { PgliteDb } from '../../store/pglite-db.js';
import { countRows } from '../../store/db-inventory.js';
import { settleRestored } from './store/backups.js';
import { compareCounts } from './verifier.js';
import { oneLine } from './hash-counter.js';
import type { RestoreSource } from './restore-source.js';

/**
 * Embedded mode's restore: a PGlite data-directory dump unpacked into the data directory
 * `target` (its `pgdata`), which must be empty (or is replaced with --force) and not in use
 * (the data-directory lock a running instance holds). PGlite loads a dump whole, in memory:
 * embedded installs are small by design.
 */
export async function restorePglite(src: RestoreSource, target: string, force: boolean, out: (line: string) => void): Promise<{ tables: number; rows: number }> {
  if (/^postgres(ql)?:\/\//.test(target)) throw new UserError(`${src.label} is a PGlite data-directory dump: --target must be an embedded data directory, not a PostgreSQL URL`);
  const dir = resolve(target);
  const lock = DataDirLock.acquire(dir);
  try {
    const pgdata = join(dir, 'pgdata');
    if (existsSync(pgdata) && readdirSync(pgdata).length) {
      if (!force) throw new UserError(`refusing to restore into ${dir}: its pgdata is not empty; pass --force to replace it`);
      out(`--force: removing ${pgdata}`);
      rmSync(pgdata, { recursive: true, force: true });
    }
    const parts: Buffer[] = [];
    const { stream } = await src.storage.open(src.key);
    await pipeline(stream, createGunzip(), new Writable({ write: (c: Buffer, _e, cb) => (parts.push(c), cb()) }));
    out(`loading the data directory (${parts.reduce((n, p) => n + p.length, 0)} bytes)`);
    mkdirSync(pgdata, { recursive: true, mode: 0o700 });
    // One open: PGlite unpacks the dump and starts on it; the counts are read on that same open.
    let db: PgliteDb;
    try {
      db = await PgliteDb.open(dir, { loadDataDir: new Blob(parts.map((p) => new Uint8Array(p))) });
    } catch (err) {
      rmSync(pgdata, { recursive: true, force: true });
      throw new UserError(`restore into ${dir} failed and was removed: ${oneLine(err)}`);
    }
    try {
      const counts = await countRows(db);
      await settleRestored(db);
      const diff = src.counts ? compareCounts(src.counts, counts) : null;
      if (diff) throw new UserError(`restored into ${dir}, but the row counts differ from the backup's: ${diff}`);
      const rows = Object.values(counts).reduce((a, b) => a + b, 0);
      out(`restored ${Object.keys(counts).length} tables, ${rows} rows into ${dir}`);
      return { tables: Object.keys(counts).length, rows };
    } finally {
      await db.close();
    }
  } finally {
    lock.release();
  }
}

import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { UserError } from '../../config/errors.js';
import { redactUrl } from '../../config/load.js';
import { PgDb } from '../../store/pg-db.js';
import { countRows, emptyDatabase, liveInstances, serverVersion, userRelations } from '../../store/db-inventory.js';
import { settleRestored } from './store/backups.js';
import { checkTool, spawnRestore } from './pg-tools.js';
import { HashCounter, allSettledOrThrow, oneLine, sink } from './hash-counter.js';
import { compareCounts } from './verifier.js';
import type { RestoreSource } from './restore-source.js';
import { restorePglite } from './restore-pglite.js';

export interface RestoreOptions {
  source: RestoreSource;
  target: string;
  force: boolean;
  livenessMs: number;
  connectTimeoutMs: number;
  binDir?: string;
  /** Progress and result lines. */
  out: (line: string) => void;
}

const mb = (n: number) => `${(n / 1048576).toFixed(1)} MB`;

/** What the archive is, from its first bytes: pg_dump's custom format starts `PGDMP`, a tar has `ustar` at 257. */
async function sniffFormat(src: RestoreSource): Promise<'pg_dump' | 'pglite'> {
  const { stream } = await src.storage.open(src.key);
  const gunzip = createGunzip();
  let head = Buffer.alloc(0);
  await new Promise<void>((resolve) => {
    const done = () => (stream.unpipe(gunzip), gunzip.destroy(), (stream as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.(), resolve());
    gunzip.on('data', (c: Buffer) => {
      head = Buffer.concat([head, c]);
      if (head.length >= 512) done();
    });
    gunzip.on('end', done);
    gunzip.on('error', done);
    stream.pipe(gunzip);
  });
  if (head.subarray(0, 5).toString('latin1') === 'PGDMP') return 'pg_dump';
  if (head.subarray(257, 262).toString('latin1') === 'ustar') return 'pglite';
  throw new UserError(`${src.label} is neither a pg_dump archive nor a PGlite data-directory dump`);
}

/** Reads the whole object once: its SHA-256 must match and its gzip stream must be complete, before the target is touched. */
async function checkObject(src: RestoreSource): Promise<number> {
  const { stream, size } = await src.storage.open(src.key);
  const hasher = new HashCounter();
  try {
    // A recorded checksum proves the bytes; without one, a complete gzip stream is the best check there is.
    await (src.sha256 ? pipeline(stream, hasher, sink()) : pipeline(stream, hasher, createGunzip(), sink()));
  } catch (err) {
    throw new UserError(`${src.label} is truncated or corrupt (${oneLine(err)}); nothing was restored`);
  }
  if (src.sha256 && hasher.hex !== src.sha256) throw new UserError(`${src.label}: checksum mismatch (sha256 ${hasher.hex}, expected ${src.sha256}); nothing was restored`);
  return size || hasher.bytes;
}

/**
 * `relay-jobs restore`: checksum first, then the target's checks (no live replicas; empty, or
 * emptied with --force), then `pg_restore` in one transaction with progress. A restore that
 * fails leaves no partial data: the transaction rolls back.
 */
export async function restore(o: RestoreOptions): Promise<{ tables: number; rows: number }> {
  const src = o.source;
  o.out(`checking ${src.label}${src.sha256 ? '' : ' (no checksum recorded: checking that the gzip stream is complete)'}`);
  const size = await checkObject(src);
  o.out(`checksum ok${src.sha256 ? ` (sha256 ${src.sha256})` : ''}, ${mb(size)}`);
  if ((await sniffFormat(src)) === 'pglite') return restorePglite(src, o.target, o.force, o.out);

  const target = await PgDb.connect({ url: o.target, poolSize: 2, connectTimeoutMs: o.connectTimeoutMs, source: '--target' });
  const where = redactUrl(o.target);
  try {
    const live = await liveInstances(target, o.livenessMs);
    if (live.length) throw new UserError(`refusing to restore into ${where}: replicas are live on it (${live.join(', ')}); stop them first`);
    const rel = await userRelations(target);
    if (rel.count > 0 && !o.force)
      throw new UserError(`refusing to restore into ${where}: it is not empty (${rel.count} relations, e.g. ${rel.sample.split(', ').slice(0, 3).join(', ')}); pass --force to empty it first`);
    const path = await checkTool('pg_restore', (await serverVersion(target)).num, o.binDir);
    if (rel.count > 0) {
      o.out(`--force: emptying ${where} (${rel.count} relations)`);
      await emptyDatabase(target);
    }
    const total = src.counts ? Object.keys(src.counts).length : null;
    let tables = 0;
    let read = 0;
    let shown = -1;
    const show = (table?: string) => {
      const pct = size ? Math.min(100, Math.floor((read / size) * 100)) : 0;
      if (!table && pct < shown + 10) return;
      shown = pct;
      o.out(`restoring: ${pct}% of ${mb(size)} read, ${tables}${total ? ` of ${total}` : ''} tables${table ? `, loading ${table}` : ''}`);
    };
    const { stream } = await src.storage.open(src.key);
    const r = spawnRestore(path, o.target, (table) => {
      tables++;
      show(table);
    });
    try {
      await allSettledOrThrow([r.done, pipeline(stream, new HashCounter((n) => ((read = n), show())), createGunzip(), r.stdin)]);
    } catch (err) {
      throw new UserError(`restore into ${where} failed and was rolled back${rel.count > 0 ? ' (the target was emptied by --force and stays empty)' : ''}: ${oneLine(err)}`);
    }
    const counts = await countRows(target);
    await settleRestored(target);
    const rows = Object.values(counts).reduce((a, b) => a + b, 0);
    if (src.counts) {
      const diff = compareCounts(src.counts, counts);
      if (diff) throw new UserError(`restored into ${where}, but the row counts differ from the backup's: ${diff}`);
    }
    o.out(`restored ${Object.keys(counts).length} tables, ${rows} rows into ${where}${src.counts ? ' (row counts match the backup)' : ''}`);
    return { tables: Object.keys(counts).length, rows };
  } finally {
    await target.close();
  }
}

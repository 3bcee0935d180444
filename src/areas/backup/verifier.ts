import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import type { Db } from '../../store/db.js';
import { PgDb } from '../../store/pg-db.js';
import { countRows, createDatabase, databaseCreator, dropDatabase, quoteIdent, serverVersion } from '../../store/db-inventory.js';
import type { BackupStorage } from './backup-storage.js';
import { checkTool, spawnRestore } from './pg-tools.js';
import { HashCounter, allSettledOrThrow, oneLine } from './hash-counter.js';

/** The first difference between two per-table row counts, as a sentence naming the table; null when equal. */
export function compareCounts(expected: Record<string, number>, actual: Record<string, number>): string | null {
  for (const [table, n] of Object.entries(expected)) {
    if (!(table in actual)) return `table ${table}: ${n} rows in the dump's snapshot, missing after restore`;
    if (actual[table] !== n) return `table ${table}: ${n} rows in the dump's snapshot, ${actual[table]} after restore`;
  }
  for (const table of Object.keys(actual)) if (!(table in expected)) return `table ${table}: restored but not in the dump's snapshot`;
  return null;
}

/**
 * A backup is good once it has been restored: the stored object is read back (its SHA-256
 * checked on the way), `pg_restore`d into a scratch database on the same server, and every
 * table's row count compared with the count taken in the dump's snapshot. The scratch
 * database is dropped whatever happens.
 */
export class Verifier {
  constructor(private readonly o: { db: Db; url: string; storage: BackupStorage; binDir?: string; connectTimeoutMs: number }) {}

  private scratchName(id: string): string {
    return `rj_verify_${id.replace(/[^a-z0-9]/gi, '').toLowerCase()}`;
  }

  /** Drops the scratch database of a backup whose writer died mid-verification. */
  async dropScratch(id: string): Promise<void> {
    await dropDatabase(this.o.db, this.scratchName(id));
  }

  /** Null when the backup restored with the same counts; otherwise why it did not. */
  async verify(p: { id: string; key: string; sha256: string; counts: Record<string, number> }, signal: AbortSignal): Promise<string | null> {
    const scratch = this.scratchName(p.id);
    const url = new URL(this.o.url);
    url.pathname = `/${scratch}`;
    // What fails here is the verification's own setup, not the backup: said as its verify error
    // (the record ends verify_failed, the dump is kept), with what to change.
    let path: string;
    try {
      path = await checkTool('pg_restore', (await serverVersion(this.o.db)).num, this.o.binDir);
      await dropDatabase(this.o.db, scratch);
      await createDatabase(this.o.db, scratch);
    } catch (err) {
      // A CREATE that committed with its reply lost, or an abort mid-way, may have left the scratch database.
      await dropDatabase(this.o.db, scratch).catch(() => undefined);
      if (signal.aborted) throw err;
      if ((err as { code?: string }).code !== '42501' || !/create database/i.test(oneLine(err))) return `verification could not start: ${oneLine(err)}`;
      const role = await databaseCreator(this.o.db).then(
        (r) => (/^[a-z_][a-z0-9_]*$/.test(r.role) ? r.role : quoteIdent(r.role)),
        () => '<role>',
      );
      return `verification could not start: ${oneLine(err)}; the service's role ${role} may not create the scratch database ${scratch}: grant it (ALTER ROLE ${role} CREATEDB) or set backup.verify: false`;
    }
    try {
      const { stream } = await this.o.storage.open(p.key);
      const hasher = new HashCounter();
      const r = spawnRestore(path, url.toString());
      const kill = () => r.proc.kill('SIGTERM');
      signal.addEventListener('abort', kill, { once: true });
      try {
        await allSettledOrThrow([r.done, pipeline(stream, hasher, createGunzip(), r.stdin)]);
      } catch (err) {
        if (signal.aborted) throw err;
        return `restore into a scratch database failed: ${oneLine(err)}`;
      } finally {
        signal.removeEventListener('abort', kill);
      }
      if (hasher.hex !== p.sha256) return `checksum mismatch: the stored object reads back as sha256 ${hasher.hex}, recorded ${p.sha256}`;
      const scratchDb = await PgDb.connect({ url: url.toString(), poolSize: 1, connectTimeoutMs: this.o.connectTimeoutMs });
      try {
        return compareCounts(p.counts, await countRows(scratchDb));
      } finally {
        await scratchDb.close();
      }
    } finally {
      await dropDatabase(this.o.db, scratch).catch(() => undefined);
    }
  }
}

import { Readable, pipeline } from 'node:stream';
import { createGzip } from 'node:zlib';
import type { Db } from '../../store/db.js';
import { PgliteDb } from '../../store/pglite-db.js';
import { countRows, serverVersion } from '../../store/db-inventory.js';
import { HashCounter, allSettledOrThrow } from './hash-counter.js';
import type { DumpResult, Dumper } from './dumper.js';

/**
 * Embedded mode: PGlite's `dumpDataDir` (a tar of the data directory, which PGlite builds in
 * memory: embedded installs are small), gzipped and hashed on the way to storage. Restore it by
 * unpacking into a new data directory (docs/backup.md).
 */
export class PgliteDumper implements Dumper {
  readonly format = 'pglite' as const;

  constructor(
    private readonly db: Db,
    private readonly level: number,
  ) {}

  async check(): Promise<void> {}

  async dump(store: (body: Readable) => Promise<void>, signal: AbortSignal): Promise<DumpResult> {
    if (!(this.db instanceof PgliteDb)) throw new Error('the PGlite dumper needs the embedded database');
    const version = await serverVersion(this.db);
    const counts = await countRows(this.db);
    const blob = await this.db.dumpDataDir();
    const hasher = new HashCounter();
    const body = pipeline(Readable.fromWeb(blob.stream() as import('node:stream/web').ReadableStream), createGzip({ level: this.level }), hasher, () => undefined) as HashCounter;
    await allSettledOrThrow([store(body)]);
    if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('backup aborted');
    return { sizeBytes: hasher.bytes, sha256: hasher.hex, counts, serverVersion: version.text };
  }
}

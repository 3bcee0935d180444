import { pipeline } from 'node:stream';
import { createGzip } from 'node:zlib';
import type { Readable } from 'node:stream';
import type { Db } from '../../store/db.js';
import { ExportedSnapshot, serverVersion } from '../../store/db-inventory.js';
import { checkTool, spawnDump } from './pg-tools.js';
import { HashCounter, allSettledOrThrow } from './hash-counter.js';

export interface DumpResult {
  sizeBytes: number;
  sha256: string;
  /** Rows per table in the dump's own snapshot (null when the format has no snapshot to count in). */
  counts: Record<string, number> | null;
  serverVersion: string;
}

/** Produces one compressed dump and hands its bytes to `store` as a stream. */
export interface Dumper {
  readonly format: 'pg_dump' | 'pglite';
  /** Fails early (one-line UserError) when the tools cannot dump this server. */
  check(): Promise<void>;
  dump(store: (body: Readable) => Promise<void>, signal: AbortSignal): Promise<DumpResult>;
}

/**
 * Cluster mode: `pg_dump -Fc` inside an exported REPEATABLE READ snapshot, while the same
 * snapshot counts each table's rows (what verification compares against). pg_dump writes
 * uncompressed custom format; Node gzips it once and hashes the gzip bytes on the way to
 * storage. Back-pressure runs the whole way: memory stays flat whatever the database size.
 */
export class PgDumper implements Dumper {
  readonly format = 'pg_dump' as const;

  constructor(private readonly o: { db: Db; url: string; binDir?: string; level: number }) {}

  async check(): Promise<void> {
    await checkTool('pg_dump', (await serverVersion(this.o.db)).num, this.o.binDir);
  }

  async dump(store: (body: Readable) => Promise<void>, signal: AbortSignal): Promise<DumpResult> {
    const version = await serverVersion(this.o.db);
    const path = await checkTool('pg_dump', version.num, this.o.binDir);
    const snapshot = await ExportedSnapshot.open(this.o.db);
    try {
      const counting = snapshot.counts();
      const p = spawnDump(path, this.o.url, snapshot.id);
      const kill = () => p.proc.kill('SIGTERM');
      signal.addEventListener('abort', kill, { once: true });
      const hasher = new HashCounter();
      const body = pipeline(p.stdout, createGzip({ level: this.o.level }), hasher, () => undefined) as HashCounter;
      const piped = store(body);
      try {
        await allSettledOrThrow([p.done, piped, counting]);
      } finally {
        signal.removeEventListener('abort', kill);
      }
      if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('backup aborted');
      return { sizeBytes: hasher.bytes, sha256: hasher.hex, counts: await counting, serverVersion: version.text };
    } finally {
      await snapshot.close();
    }
  }
}

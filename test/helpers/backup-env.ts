import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PgDb } from '../../src/store/pg-db.js';
import type { Db } from '../../src/store/db.js';
import { migrate } from '../../src/app/migrations.js';
import { Backups } from '../../src/areas/backup/store/backups.js';
import { BackupService } from '../../src/areas/backup/backup-service.js';
import { PgDumper, type Dumper } from '../../src/areas/backup/dumper.js';
import { Verifier } from '../../src/areas/backup/verifier.js';
import { FsStorage, type BackupStorage } from '../../src/areas/backup/backup-storage.js';
import { BackupMetrics } from '../../src/areas/backup/metrics.js';
import { silentLogger } from '../../src/telemetry/logger.js';
import { systemClock } from '../../src/time/clock.js';
import { Registry } from 'prom-client';
import { freshDatabase } from './services.js';

/**
 * A migrated database of its own with a backup service writing to a temporary directory (or the
 * given storage); `on` runs it on a database that exists (migrated already), connected as its URL says.
 */
export async function backupEnv(
  opts: {
    instanceId?: string;
    leaseMs?: number;
    storage?: BackupStorage;
    dumper?: (d: Dumper) => Dumper;
    verify?: boolean;
    keepLast?: number;
    verifyAs?: { db: Db; url: string };
    on?: { url: string; name: string };
  } = {},
) {
  const fresh = opts.on ? { ...opts.on, drop: async () => undefined } : await freshDatabase({ migrated: true });
  const db = await PgDb.connect({ url: fresh.url, poolSize: 4, connectTimeoutMs: 5000 });
  if (!opts.on) await migrate(db);
  const dir = mkdtempSync(join(tmpdir(), 'rj-backup-'));
  const storage = opts.storage ?? new FsStorage(dir);
  const make = (instanceId: string, leaseMs = opts.leaseMs ?? 5000) => {
    const base = new PgDumper({ db, url: fresh.url, level: 6 });
    return new BackupService({
      backups: new Backups(db),
      storage,
      dumper: opts.dumper ? opts.dumper(base) : base,
      verifier: opts.verify === false ? null : new Verifier({ db: opts.verifyAs?.db ?? db, url: opts.verifyAs?.url ?? fresh.url, storage, connectTimeoutMs: 5000 }),
      clock: systemClock,
      log: silentLogger(),
      metrics: new BackupMetrics(new Registry()),
      instanceId,
      env: 'test',
      dbName: fresh.name,
      compression: 'gzip',
      leaseMs,
      keepLast: opts.keepLast ?? 14,
    });
  };
  return {
    db,
    url: fresh.url,
    name: fresh.name,
    dir,
    storage,
    backups: new Backups(db),
    service: make(opts.instanceId ?? 'replica-a'),
    make,
    async cleanup() {
      await db.close();
      await fresh.drop();
    },
  };
}

import { join } from 'node:path';
import type { Config } from '../../config/load.js';
import { UserError } from '../../config/errors.js';
import { Backups } from './store/backups.js';
import { FsStorage, type BackupStorage } from './backup-storage.js';
import { S3Storage } from './s3-storage.js';
import { BackupService } from './backup-service.js';
import { PgDumper, type Dumper } from './dumper.js';
import { PgliteDumper } from './pglite-dumper.js';
import { Verifier } from './verifier.js';
import { wired, type WiringContext } from '../../modules/wiring.js';
import { BackupMetrics } from './metrics.js';

/** The storage `backup.storage` names: `backup.dir` (default `<data_dir>/backups`) or the S3 bucket. */
export function backupStorage(config: Config): BackupStorage {
  const b = config.backup;
  if (b.storage === 's3') {
    const s = b.s3!;
    const prefix = s.prefix && !s.prefix.endsWith('/') ? `${s.prefix}/` : s.prefix;
    return new S3Storage({ bucket: s.bucket, prefix, region: s.region, endpoint: s.endpoint, forcePathStyle: s.force_path_style, partSizeMb: s.part_size_mb });
  }
  return new FsStorage(b.dir ?? join(config.database.data_dir, 'backups'));
}

/** The name a database has in object keys: the URL's database name, `embedded` for PGlite. */
export function backupDbName(config: Config): string {
  if (config.mode !== 'cluster') return 'embedded';
  return decodeURIComponent(new URL(config.database.url!).pathname.slice(1)) || 'postgres';
}

export function buildBackup(w: WiringContext) {
  const { config, db, clock, log, metrics } = w;
  const b = config.backup;
  const storage = backupStorage(config);
  let dumper: Dumper;
  let verifier: Verifier | null = null;
  if (config.mode === 'cluster') {
    const url = config.database.url!;
    dumper = new PgDumper({ db, url, binDir: b.pg_bin_dir, level: b.compression_level });
    if (b.verify ?? true) verifier = new Verifier({ db, url, storage, binDir: b.pg_bin_dir, connectTimeoutMs: config.database.connect_timeout });
  } else {
    if (b.verify) throw new UserError('backup.verify: verification restores into a scratch PostgreSQL database and needs cluster mode; leave it unset in embedded mode');
    dumper = new PgliteDumper(db, b.compression_level);
  }
  const backup = new BackupService({
    backups: new Backups(db),
    storage,
    dumper,
    verifier,
    clock,
    log: log.child({ area: 'backup' }),
    metrics: metrics.group(BackupMetrics),
    instanceId: config.instance.id,
    aliveKey: () => w.liveness?.key ?? null,
    env: config.instance.env,
    dbName: backupDbName(config),
    compression: b.compression,
    leaseMs: b.lease,
    keepLast: b.keep_last,
    keepDays: b.keep_days,
    ticks: metrics.loopTicks,
    wakes: w.wakes,
  });
  w.wakes?.on('backups', (why) => backup.wakeReaper(why));
  return wired({ services: { backup }, rungs: [] });
}

/** What the backup area's job and routes use. */
export type BackupServices = ReturnType<typeof buildBackup>['services'];

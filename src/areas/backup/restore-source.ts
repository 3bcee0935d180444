import { existsSync } from 'node:fs';
import type { Config } from '../../config/load.js';
import { UserError } from '../../config/errors.js';
import { PgDb } from '../../store/pg-db.js';
import { Backups } from './store/backups.js';
import { checksumKey, fileSource, type BackupStorage } from './backup-storage.js';
import { S3Storage, parseS3Uri } from './s3-storage.js';

/** What `relay-jobs restore` reads: the object, the checksum it must have (when known), the counts it must restore to. */
export interface RestoreSource {
  storage: BackupStorage;
  key: string;
  label: string;
  format: 'pg_dump' | 'pglite';
  sha256: string | null;
  counts: Record<string, number> | null;
  close(): void;
}

function sidecar(text: string | null): string | null {
  const m = text ? /^([0-9a-f]{64})\b/.exec(text.trim()) : null;
  return m ? m[1]! : null;
}

/**
 * `<backup-id|file|s3-uri>`: an `s3://bucket/key` URI (region/endpoint from `backup.s3`,
 * credentials from the AWS variables), a path to a `.dump.gz` file, or the id of a backup
 * recorded in the configured database (found in the configured storage).
 */
export async function resolveSource(source: string, config: Config, makeStorage: (c: Config) => BackupStorage): Promise<RestoreSource> {
  const s3 = parseS3Uri(source);
  if (s3) {
    const c = config.backup.s3;
    const storage = new S3Storage({
      bucket: s3.bucket,
      prefix: '',
      region: c?.region ?? process.env.AWS_REGION ?? 'us-east-1',
      endpoint: c?.endpoint,
      forcePathStyle: c?.force_path_style ?? false,
      partSizeMb: 16,
    });
    return { storage, key: s3.key, label: source, format: 'pg_dump', sha256: sidecar(await storage.readText(checksumKey(s3.key))), counts: null, close: () => storage.close() };
  }
  if (source.includes('/') || source.endsWith('.gz') || existsSync(source)) {
    if (!existsSync(source)) throw new UserError(`backup file ${source} does not exist`);
    const storage = fileSource(source);
    return { storage, key: storage.key, label: source, format: 'pg_dump', sha256: sidecar(await storage.readText(checksumKey(storage.key))), counts: null, close: () => undefined };
  }
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(source)) throw new UserError(`${JSON.stringify(source)} is not a backup id, a file or an s3:// URI`);
  if (config.mode !== 'cluster') throw new UserError(`restoring backup ${source} by id needs DATABASE_URL (the database that recorded it); in embedded mode pass the backup's file instead`);
  const db = await PgDb.connect({ url: config.database.url!, poolSize: 1, connectTimeoutMs: config.database.connect_timeout });
  let rec;
  try {
    rec = await new Backups(db).get(source);
  } finally {
    await db.close();
  }
  if (!rec) throw new UserError(`no backup ${source} in the configured database (relay-jobs backups lists them)`);
  if (rec.state === 'running' || rec.state === 'failed') throw new UserError(`backup ${source} is ${rec.state}${rec.error ? ` (${rec.error})` : ''}: nothing complete to restore`);
  const storage = makeStorage(config);
  if (storage.kind !== rec.storage) throw new UserError(`backup ${source} is in ${rec.storage} storage but backup.storage is ${storage.kind}: restore it by its file or s3:// URI (${rec.location})`);
  return {
    storage,
    key: rec.object_key,
    label: `backup ${source} (${rec.location})`,
    format: rec.format,
    sha256: rec.sha256,
    counts: rec.table_counts,
    close: () => (storage as Partial<S3Storage>).close?.(),
  };
}

import type { Config } from '../config/load.js';
import { PgDb } from '../store/pg-db.js';
import { PgliteDb } from '../store/pglite-db.js';
import { DataDirLock } from '../store/data-dir-lock.js';
import { migrate } from '../app/migrations.js';
import type { Db } from '../store/db.js';

/** `relay-jobs migrate`: applies pending migrations (safe while replicas run: an advisory lock serialises it). */
export async function migrateCommand(config: Config): Promise<void> {
  let db: Db;
  let lock: DataDirLock | null = null;
  if (config.mode === 'cluster') {
    db = await PgDb.connect({ url: config.database.url!, poolSize: 2, connectTimeoutMs: config.database.connect_timeout });
  } else {
    lock = DataDirLock.acquire(config.database.data_dir);
    db = await PgliteDb.open(config.database.data_dir, { sharedBuffersMb: config.database.embedded_shared_buffers_mb });
  }
  try {
    const applied = await migrate(db, (m) => process.stdout.write(`applying ${m.version}_${m.name}\n`));
    process.stdout.write(applied.length ? `applied ${applied.map((m) => `${m.version}_${m.name}`).join(', ')}\n` : 'database is up to date\n');
  } finally {
    await db.close();
    lock?.release();
  }
}

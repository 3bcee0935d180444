import type { Db } from './db.js';
import { MIGRATIONS, type Migration } from './migrations/index.js';

/**
 * Applies pending migrations in one transaction under a transaction-scoped advisory lock, so
 * replicas starting together apply each migration once and the others wait, then see it done.
 */
export async function migrate(db: Db, migrations: Migration[] = MIGRATIONS, onApply?: (m: Migration) => void): Promise<Migration[]> {
  return db.tx(async (q) => {
    // The lock comes first: even CREATE TABLE IF NOT EXISTS races when replicas start together.
    await q.query(`SELECT pg_advisory_xact_lock(hashtextextended('relay-jobs:migrate', 0))`);
    await q.query(`CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await q.query<{ version: number }>('SELECT version FROM schema_migrations');
    const applied = new Set(rows.map((r) => Number(r.version)));
    const pending = migrations.filter((m) => !applied.has(m.version)).sort((a, b) => a.version - b.version);
    for (const m of pending) {
      onApply?.(m);
      await q.exec(m.sql);
      await q.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
    }
    return pending;
  });
}

export async function pendingMigrations(db: Db): Promise<Migration[]> {
  const { rows } = await db.query<{ exists: boolean }>(`SELECT to_regclass('schema_migrations') IS NOT NULL AS exists`);
  if (!rows[0]?.exists) return MIGRATIONS;
  const applied = new Set((await db.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => Number(r.version)));
  return MIGRATIONS.filter((m) => !applied.has(m.version));
}

import type { Db } from './db.js';
import type { Migration } from './migrations/index.js';

/**
 * Applies the pending ones of `migrations` (the whole database's list: app/migrations.ts) in
 * version order, in one transaction under a transaction-scoped advisory lock, so replicas starting
 * together apply each migration once and the others wait, then see it done.
 */
export async function applyMigrations(db: Db, migrations: readonly Migration[], onApply?: (m: Migration) => void): Promise<Migration[]> {
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

/** The highest version of all (a new migration takes the next one: a gap would run out of order on a database already past it). */
const highest = (groups: readonly { migrations: readonly Migration[] }[]) => Math.max(0, ...groups.flatMap((g) => g.migrations.map((m) => m.version)));

/**
 * One list from the kernel's migrations and each area's: a version belongs to one migration
 * across all of them (a clash names both owners), since `schema_migrations` records versions only.
 */
export function collectMigrations(groups: readonly { owner: string; migrations: readonly Migration[] }[]): Migration[] {
  const seen = new Map<number, string>();
  const problems: string[] = [];
  for (const g of groups) {
    for (const m of g.migrations) {
      const other = seen.get(m.version);
      if (other !== undefined) problems.push(`migration version ${m.version} (${g.owner}: ${m.name}) is already taken by ${other}; use the next number above the highest (${highest(groups) + 1})`);
      else seen.set(m.version, `${g.owner}: ${m.name}`);
    }
  }
  if (problems.length) throw new Error(problems.join('; '));
  return groups.flatMap((g) => g.migrations).sort((a, b) => a.version - b.version);
}

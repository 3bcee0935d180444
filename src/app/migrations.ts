import type { Db } from '../store/db.js';
import { applyMigrations, collectMigrations } from '../store/migrate.js';
import { KERNEL_MIGRATIONS, type Migration } from '../store/migrations/index.js';
import { AREAS } from './registry.js';

/** The whole database's migrations: the kernel's and every listed area's, in version order. */
export const MIGRATIONS: readonly Migration[] = collectMigrations([
  { owner: 'the kernel (src/store/migrations)', migrations: KERNEL_MIGRATIONS },
  ...AREAS.map((a) => ({ owner: `area ${a.name}`, migrations: a.migrations ?? [] })),
]);

/** Applies the database's pending migrations (see applyMigrations); returns what it applied. */
export function migrate(db: Db, onApply?: (m: Migration) => void): Promise<Migration[]> {
  return applyMigrations(db, MIGRATIONS, onApply);
}

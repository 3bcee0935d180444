// A cold embedded (PGlite) open creates a new database cluster in WASM: 8-14 s on a quiet machine,
// over 30 s on a loaded one, paid again by every test that opens a new data directory. Instead the
// vitest global setup (build-cli.ts) creates ONE data directory, migrated, and every test that needs
// a fresh embedded database gets a copy of it (about 1-2 s to copy, 1-4 s to open). The template is
// rebuilt whenever src/ changed, so it always holds the current migrations. A second template holds
// the same database created but not migrated, for tests about migrating (`relay-jobs migrate`, a
// service stopped while it applies migrations): they get a fresh database without the cold open.
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PgliteDb } from '../../src/store/pglite-db.js';
import { migrate } from '../../src/app/migrations.js';

/** A data directory (`<dir>/pgdata` inside) as `RELAY_JOBS_DATA_DIR` expects it. */
export const PGLITE_TEMPLATE = fileURLToPath(new URL('../../.test-dist/pglite-template', import.meta.url));
/** The same, created (initdb) but with no migration applied. */
export const PGLITE_EMPTY_TEMPLATE = fileURLToPath(new URL('../../.test-dist/pglite-empty-template', import.meta.url));

/** Called by the global setup when the template is missing or older than src/. */
export async function buildPgliteTemplate(): Promise<void> {
  rmSync(PGLITE_TEMPLATE, { recursive: true, force: true });
  rmSync(PGLITE_EMPTY_TEMPLATE, { recursive: true, force: true });
  const building = `${PGLITE_TEMPLATE}.building`;
  rmSync(building, { recursive: true, force: true });
  // The one cold open: created, closed and copied unmigrated; then reopened (warm) and migrated.
  await (await PgliteDb.open(building)).close();
  cpSync(building, PGLITE_EMPTY_TEMPLATE, { recursive: true });
  const db = await PgliteDb.open(building);
  await migrate(db);
  await db.close();
  cpSync(building, PGLITE_TEMPLATE, { recursive: true });
  rmSync(building, { recursive: true, force: true });
}

/**
 * A new data directory holding a migrated embedded database, ready for `RELAY_JOBS_DATA_DIR` or
 * `PgliteDb.open(dir)`. Under `parent` when given (the test's own temp folder), else a new temp folder.
 */
export function embeddedDataDir(parent?: string, opts: { migrated?: boolean } = {}): string {
  const template = opts.migrated === false ? PGLITE_EMPTY_TEMPLATE : PGLITE_TEMPLATE;
  if (!existsSync(join(template, 'pgdata', 'PG_VERSION'))) throw new Error(`no PGlite template at ${template}: the vitest global setup builds it`);
  const dir = parent ?? mkdtempSync(join(tmpdir(), 'rj-embedded-'));
  cpSync(template, dir, { recursive: true });
  return dir;
}

/** A migrated PGlite database of its own, from the template; `cleanup` closes it and removes its folder. */
export async function openEmbeddedDb(): Promise<{ db: PgliteDb; dir: string; cleanup: () => Promise<void> }> {
  const dir = embeddedDataDir();
  const db = await PgliteDb.open(dir);
  return {
    db,
    dir,
    cleanup: async () => {
      await db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

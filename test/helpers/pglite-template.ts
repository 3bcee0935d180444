// A cold embedded (PGlite) open creates a new database cluster in WASM: 8-14 s on a quiet machine,
// over 30 s on a loaded one, paid again by every test that opens a new data directory. Instead the
// vitest global setup (build-cli.ts) creates ONE data directory, migrated, and every test that needs
// a fresh embedded database gets a copy of it (about 1-2 s to copy, 1-4 s to open). It lives in
// .test-pglite/, not in .test-dist/ (the CLI build replaces that folder whole). The template is
// rebuilt whenever src/ changed, so it always holds the current migrations. A second template holds
// the same database created but not migrated, for tests about migrating (`relay-jobs migrate`, a
// service stopped while it applies migrations): they get a fresh database without the cold open.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PgliteDb } from '../../src/store/pglite-db.js';
import { migrate } from '../../src/app/migrations.js';

/** A data directory (`<dir>/pgdata` inside) as `RELAY_JOBS_DATA_DIR` expects it. */
export const PGLITE_TEMPLATE = fileURLToPath(new URL('../../.test-pglite/pglite-template', import.meta.url));
/** The same, created (initdb) but with no migration applied. */
export const PGLITE_EMPTY_TEMPLATE = fileURLToPath(new URL('../../.test-pglite/pglite-empty-template', import.meta.url));

/**
 * Called by the global setup when the template is missing or older than src/. Two vitest runs of
 * one checkout may build at once (and others copy the template meanwhile): each builds in a folder
 * of its own and renames it into place, so a template path always names a whole template; the one
 * it replaces is moved aside and removed only by a later build (a run may still be copying it).
 */
export async function buildPgliteTemplate(): Promise<void> {
  const root = dirname(PGLITE_TEMPLATE);
  mkdirSync(root, { recursive: true });
  for (const old of readdirSync(root).filter((f) => f.startsWith('pglite-old-') || f.startsWith('pglite-building-'))) {
    const path = join(root, old);
    if (Date.now() - statSync(path).mtimeMs > 10 * 60_000) rmSync(path, { recursive: true, force: true });
  }
  const building = mkdtempSync(join(root, 'pglite-building-'));
  const empty = mkdtempSync(join(root, 'pglite-building-'));
  // The one cold open: created, closed and copied unmigrated; then reopened (warm) and migrated.
  await (await PgliteDb.open(building)).close();
  cpSync(building, empty, { recursive: true });
  const db = await PgliteDb.open(building);
  await migrate(db);
  await db.close();
  swapIn(empty, PGLITE_EMPTY_TEMPLATE);
  swapIn(building, PGLITE_TEMPLATE);
}

/** Moves `from` to `to` atomically; what was at `to` is moved aside (removed by a later build). */
function swapIn(from: string, to: string): void {
  if (existsSync(to)) {
    try {
      renameSync(to, `${dirname(to)}/pglite-old-${process.pid}-${Date.now()}-${basename(to)}`);
    } catch {
      // Another build moved it aside first.
    }
  }
  try {
    renameSync(from, to);
  } catch {
    // Another build put its own in place between the two renames: it holds the same migrations.
    rmSync(from, { recursive: true, force: true });
  }
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

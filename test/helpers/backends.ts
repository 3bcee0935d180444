import { PgDb } from '../../src/store/pg-db.js';
import { migrate } from '../../src/app/migrations.js';
import type { Db } from '../../src/store/db.js';
import { openEmbeddedDb } from './pglite-template.js';
import { freshDatabase } from './services.js';

export interface Backend {
  name: 'postgres' | 'pglite';
  /** A migrated database of its own; `cleanup` closes and drops it. */
  open(): Promise<{ db: Db; url?: string; cleanup: () => Promise<void> }>;
}

/** The same store tests run on the machine's PostgreSQL and on PGlite. */
export const BACKENDS: Backend[] = [
  {
    name: 'postgres',
    async open() {
      const fresh = await freshDatabase({ migrated: true });
      const db = await PgDb.connect({ url: fresh.url, poolSize: 30, connectTimeoutMs: 5000 });
      await migrate(db);
      return {
        db,
        url: fresh.url,
        cleanup: async () => {
          await db.close();
          await fresh.drop();
        },
      };
    },
  },
  {
    name: 'pglite',
    async open() {
      // A copy of the migrated template (no cold open); migrate() then finds nothing to do.
      const { db, cleanup } = await openEmbeddedDb();
      await migrate(db);
      return { db, cleanup };
    },
  },
];

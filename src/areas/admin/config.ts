import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { numeric, positiveDuration, positiveInt, postgresUrl } from '../../config/fields.js';

/** The admin area's config sections (keys of the config file), in config.example.yaml order. */
export const adminConfig = {
  // The read-only SQL console (POST /api/v1/sql, relay-jobs sql); docs/security.md.
  sql: z
    .object({
      statement_timeout: positiveDuration.default(5000),
      database_url: postgresUrl.optional(),
      concurrency: positiveInt.default(2),
      max_rows: numeric(z.number().int().min(1).max(100_000)).default(1000),
      // A reply's values (their text form) at most, bytes; the server sends NULLs past it (4 MiB).
      max_reply_bytes: numeric(
        z
          .number()
          .int()
          .min(1024)
          .max(256 * 1024 * 1024),
      ).default(4 * 1024 * 1024),
      embedded_snapshot_max_age: positiveDuration.default(30_000),
    })
    .strict()
    .prefault({}),
  admin: z
    .object({ session_cleanup_interval_secs: positiveInt.default(3600), session_ttl_minutes: positiveInt.default(1440) })
    .strict()
    .prefault({}),
};

// Its sections in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof adminConfig> {}
}

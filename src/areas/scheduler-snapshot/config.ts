import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { duration, positiveDuration, positiveInt } from '../../config/fields.js';

/** The scheduler-snapshot area's config sections (keys of the config file), in config.example.yaml order. */
export const snapshotConfig = {
  snapshot: z
    .object({
      poll_interval: positiveDuration.default(1000),
      batch_size: positiveInt.default(200),
      claim_ttl: positiveDuration.default(30_000),
      lag_bound: positiveDuration.default(10_000),
      lag_polls: positiveInt.default(3),
      backlog_limit: positiveInt.default(10_000),
      rebuild_every: positiveDuration.default(300_000),
      rebuild_backoff_base: positiveDuration.default(5_000),
      rebuild_backoff_max: positiveDuration.default(300_000),
      rebuild_chunk: positiveInt.default(2000),
      // The read API serves a bucket from this replica's memory this long after it last checked the store (0: every read checks).
      read_max_age: duration.refine((ms) => ms >= 0 && ms <= 10_000, { message: 'expected a duration from 0 to 10s' }).default(100),
    })
    .strict()
    .prefault({}),
};

// Its sections in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof snapshotConfig> {}
}

import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { DAY, positiveDuration, positiveInt, timeZone } from '../../config/fields.js';

/** The usage area's config sections (keys of the config file), in config.example.yaml order. */
export const usageConfig = {
  usage: z
    .object({
      batch_size: positiveInt.default(1000),
      queue_limit: positiveInt.default(100_000),
      overflow: z.enum(['sync', 'drop']).default('sync'),
      max_events_per_request: positiveInt.default(5000),
      retention: positiveDuration.default(90 * DAY),
      hourly_retention: positiveDuration.default(180 * DAY),
      daily_retention: positiveDuration.default(730 * DAY),
      delete_batch: positiveInt.default(5000),
      timezone: timeZone.default('UTC'),
      lookback: positiveDuration.default(2 * 3_600_000),
      partitions_ahead: positiveInt.default(3),
      cleanup_every: positiveDuration.default(6 * 3_600_000),
      task_timeout: positiveDuration.default(30 * 60_000),
    })
    .strict()
    .prefault({}),
  idempotency: z
    .object({ ttl: positiveDuration.default(DAY), lock: positiveDuration.default(60_000) })
    .strict()
    .prefault({}),
  quota: z
    .object({ flush_batch: positiveInt.default(1000), flush_delay: positiveDuration.default(5000) })
    .strict()
    .prefault({}),
};

// Its sections in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof usageConfig> {}
}

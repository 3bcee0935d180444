import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { DAY, positiveDuration, positiveInt } from '../../config/fields.js';

/** The probes area's config sections (keys of the config file), in config.example.yaml order. */
export const probesConfig = {
  channel_monitor: z
    .object({
      min_interval: positiveDuration.default(15_000),
      raw_retention: positiveDuration.default(2 * DAY),
      rollup_retention: positiveDuration.default(30 * DAY),
      pool_size: positiveInt.default(128),
      claim_batch: positiveInt.default(50),
      poll_interval: positiveDuration.default(250),
      lease_grace: positiveDuration.default(5000),
      late_after: positiveDuration.default(1000),
      default_timeout: positiveDuration.default(10_000),
      // A passing probe slower than this is recorded as degraded (a monitor's degraded_after overrides it).
      degraded_after: positiveDuration.default(5000),
    })
    .strict()
    .prefault({}),
  scheduled_account_test: z
    .object({ concurrency: positiveInt.default(10), poll_interval: positiveDuration.default(1000), timeout: positiveDuration.default(30_000) })
    .strict()
    .prefault({}),
};

// Its sections in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof probesConfig> {}
}

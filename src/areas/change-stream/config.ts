import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { positiveDuration, positiveInt } from '../../config/fields.js';

/** The change-stream area's config section (`change_stream`), in config.example.yaml order. */
export const changeStreamConfig = {
  change_stream: z
    .object({
      poll_interval: positiveDuration.default(1000),
      batch_size: positiveInt.default(500),
      max_len: positiveInt.default(100_000),
      retention: positiveDuration.default(86_400_000),
      lag_bound: positiveDuration.default(60_000),
    })
    .strict()
    .prefault({}),
};

// Its section in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof changeStreamConfig> {}
}

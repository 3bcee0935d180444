import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { numeric, port, positiveDuration, positiveInt, providerUrl } from '../../config/fields.js';

/** A channel's cluster-wide send budget: `count` sends per `period` across every replica; 0 = unlimited. */
const channelRateLimit = z
  .object({
    count: numeric(z.number().int('expected a whole number of sends').min(0, 'expected 0 (unlimited) or a positive whole number')).default(0),
    period: positiveDuration.default(60_000),
  })
  .strict();

/** The notifications area's config sections (keys of the config file), in config.example.yaml order. */
export const notificationsConfig = {
  notify: z
    .object({
      smtp: z
        .object({ host: z.string().min(1), port: port.default(587), secure: z.boolean().default(false), user: z.string().optional(), pass: z.string().optional(), from: z.string().min(3) })
        .strict()
        .optional(),
      webhook: z
        .object({ url: providerUrl(/^https?:\/\//, 'expected an http(s) URL', 'notify.webhook.secret (it signs every request)'), secret: z.string().min(16).optional() })
        .strict()
        .optional(),
      per_second: numeric(z.number().positive()).default(5),
      // Per channel, cluster-wide (held in PostgreSQL), unlike per_second, which is per process.
      rate_limit: z
        .object({ email: channelRateLimit.prefault({}), webhook: channelRateLimit.prefault({}) })
        .strict()
        .prefault({}),
      max_attempts: positiveInt.default(5),
      retry_base: positiveDuration.default(60_000),
      send_timeout: positiveDuration.default(10_000),
      batch: positiveInt.default(100),
    })
    .strict()
    .prefault({}),
};

// Its sections in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof notificationsConfig> {}
}

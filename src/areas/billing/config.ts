import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { positiveDuration, positiveInt, providerUrl } from '../../config/fields.js';

/** The billing area's config sections (keys of the config file), in config.example.yaml order. */
export const billingConfig = {
  billing: z
    .object({
      currency: z
        .string()
        .regex(/^[A-Z]{3}$/, 'expected a three-letter currency code such as CNY')
        .default('CNY'),
      reminder_days: z.array(positiveInt).min(1).default([7, 3, 1]),
      order_ttl: positiveDuration.default(30 * 60_000),
    })
    .strict()
    .prefault({}),
  payments: z
    .object({
      providers: z
        .record(
          z.string().regex(/^[a-z0-9_-]{1,32}$/, 'expected a provider name of 1-32 characters a-z, 0-9, _ or -'),
          z
            .object({
              base_url: providerUrl(/^https?:\/\//, 'expected an http(s) URL', 'payments.providers.<name>.api_key'),
              api_key: z.string().min(1).optional(),
              webhook_secret: z.string().min(16, 'expected at least 16 characters'),
            })
            .strict(),
        )
        .default({}),
      webhook_tolerance: positiveDuration.default(300_000),
      request_timeout: positiveDuration.default(10_000),
      reconcile_window: positiveDuration.default(30 * 60_000),
      batch: positiveInt.default(100),
      retry_base: positiveDuration.default(60_000),
    })
    .strict()
    .prefault({}),
};

// Its sections in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof billingConfig> {}
}

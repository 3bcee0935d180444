import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { duration, positiveDuration, timeZone } from '../../config/fields.js';

/**
 * ops_cleanup targets and their default retention in days (0 empties the target, negative skips it).
 * `job_runs` is not one: `scheduler.run_retention` prunes it (deprecated-keys.ts maps the old key).
 */
export const OPS_RETENTION = {
  ops_metrics_minute: 7,
  ops_metrics_hourly: 90,
  ops_metrics_daily: 730,
  ops_alert_events: 90,
  notification_deliveries: 30,
  canary_runs: 7,
  /** Rows the database refused for their content (usage, spilled usage, quota counters), kept for the operator to look at. */
  dead_letters: 90,
  /** Per-replica counter increments (usage dropped/spilled, quota flush errors) the collector sums per bucket. */
  ops_counter_increments: 7,
} satisfies Record<string, number>;

/** `ops.retention_days`: the keys given merge over the defaults (setting one keeps the others); an unknown target is an error naming it. */
const retentionDays = z
  .record(z.string(), z.number().int('expected a whole number of days').min(-1, 'expected -1 (skip), 0 (empty) or a number of days'))
  .superRefine((days, ctx) => {
    for (const name of Object.keys(days)) {
      if (!(name in OPS_RETENTION)) ctx.addIssue({ code: 'custom', path: [name], message: `unknown ops_cleanup target; known: ${Object.keys(OPS_RETENTION).join(', ')}` });
    }
  })
  .transform((days): typeof OPS_RETENTION & Record<string, number> => ({ ...OPS_RETENTION, ...days }));

/** The ops area's config sections (keys of the config file), in config.example.yaml order. */
export const opsConfig = {
  ops: z
    .object({
      // The collector's bucket: one ops_metrics row per bucket, cluster-wide.
      bucket: duration.refine((ms) => ms >= 1000 && ms <= 3_600_000, { message: 'expected a duration from 1s to 1h' }).default(60_000),
      alert_interval: positiveDuration.default(60_000),
      notify_min_severity: z.enum(['info', 'warning', 'critical']).default('info'),
      alert_recipients: z.array(z.string().min(3)).default([]),
      timezone: timeZone.default('UTC'),
      retention_days: retentionDays.default(() => ({ ...OPS_RETENTION })),
    })
    .strict()
    .prefault({}),
};

// Its sections in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof opsConfig> {}
}

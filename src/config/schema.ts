// Longer than one read on purpose: the whole configuration schema, section by section in the order of
// config.example.yaml, so a key and its default are found in one place. Job keys are not here (each job declares its own).
import { z } from 'zod';
import { positiveDuration, duration } from './duration-schema.js';
import { hasUserinfo } from './redact-url.js';
import { INDEXABLE_LINE_BYTES, maxIndexableN } from '../areas/images/image-limits.js';
import { backupSchema } from '../areas/backup/config.js';
import { parseRedisUrl } from './redis-url.js';

/**
 * The configuration file's schema. Every object is strict: an unknown key is an error that
 * names the key, because a typo silently ignored is a job silently misconfigured.
 * Durations become milliseconds here; job defaults live with the jobs (see resolveJob).
 */
export { duration, positiveDuration } from './duration-schema.js';
/** A number, also from text that is one ("8080" in a quoted YAML value); other text stays text, so errors show it. */
export const numeric = <T extends z.ZodType>(schema: T) => z.preprocess((v) => (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v)) ? Number(v) : v), schema);
const port = numeric(z.number().int().min(0).max(65535));
export const positiveInt = numeric(z.number().int().positive());

/**
 * An outgoing provider URL: credentials in it (`user:pass@`) are refused, naming the key that
 * takes them instead. fetch refuses such a URL and quotes it whole in its error text, which then
 * reaches logs and stored rows; a key in its own field is sealed and sent as a header.
 */
const providerUrl = (pattern: RegExp, expected: string, instead: string) =>
  z
    .string()
    .regex(pattern, expected)
    .refine((u) => !hasUserinfo(u), `must not carry credentials (user:pass@host): put the secret in ${instead} instead`);

/** The keys every job has under `jobs.<name>`; a job adds its own (see jobs/define-job.ts). */
export const jobBase = {
  enabled: z.boolean().optional(),
  every: positiveDuration.optional(),
  cron: z.string().min(1).optional(),
  timezone: z.string().min(1).optional(),
  timeout: positiveDuration.optional(),
  lock_ttl: positiveDuration.optional(),
  jitter: duration.optional(),
  /** Where in its period the job's slots fall (0 = on the aligned instant); default: a stable hash of the name, see scheduler.offset_max. */
  offset: duration.optional(),
  missed: z.enum(['run_late', 'skip']).optional(),
  /** Level of the "round finished" line of a round that found nothing to do (default debug: idle jobs stay quiet). */
  no_work_log: z.enum(['debug', 'info']).optional(),
};

export const jobSettingsSchema = z.object(jobBase).strict();
export type JobSettingsInput = z.infer<typeof jobSettingsSchema>;

const DAY = 86_400_000;
const SNAPSHOT_DEFAULTS = {
  poll_interval: 1000,
  batch_size: 200,
  claim_ttl: 30_000,
  lag_bound: 10_000,
  lag_polls: 3,
  backlog_limit: 10_000,
  rebuild_every: 300_000,
  rebuild_backoff_base: 5_000,
  rebuild_backoff_max: 300_000,
  rebuild_chunk: 2000,
};
const HTTP_DEFAULTS = { headers_timeout: 10_000, request_timeout: 30_000, keep_alive_timeout: 5000, socket_timeout: 60_000, max_connections: 1000 };
const SQL_DEFAULTS = { statement_timeout: 5000, concurrency: 2, max_rows: 1000, embedded_max_cost: 20_000 };
/** A channel's cluster-wide send budget: `count` sends per `period` across every replica; 0 = unlimited. */
const channelRateLimit = z
  .object({
    count: numeric(z.number().int('expected a whole number of sends').min(0, 'expected 0 (unlimited) or a positive whole number')).default(0),
    period: positiveDuration.default(60_000),
  })
  .strict();
const RATE_LIMIT_DEFAULTS = { email: { count: 0, period: 60_000 }, webhook: { count: 0, period: 60_000 } };

const USAGE_DEFAULTS = {
  batch_size: 1000,
  queue_limit: 100_000,
  overflow: 'sync' as const,
  max_events_per_request: 5000,
  retention: 90 * DAY,
  hourly_retention: 180 * DAY,
  daily_retention: 730 * DAY,
  delete_batch: 5000,
  timezone: 'UTC',
  lookback: 2 * 3_600_000,
  partitions_ahead: 3,
  cleanup_every: 6 * 3_600_000,
  task_timeout: 30 * 60_000,
};

/**
 * ops_cleanup targets and their default retention in days (0 empties the target, negative skips it).
 * `job_runs` is not one: `scheduler.run_retention` prunes it (deprecated-keys.ts maps the old key).
 */
export const OPS_RETENTION: Record<string, number> = {
  ops_metrics_minute: 7,
  ops_metrics_hourly: 90,
  ops_metrics_daily: 730,
  ops_alert_events: 90,
  notification_deliveries: 30,
  canary_runs: 7,
};
/** `ops.retention_days`: the keys given merge over the defaults (setting one keeps the others); an unknown target is an error naming it. */
const retentionDays = z
  .record(z.string(), z.number().int('expected a whole number of days').min(-1, 'expected -1 (skip), 0 (empty) or a number of days'))
  .superRefine((days, ctx) => {
    for (const name of Object.keys(days)) {
      if (!(name in OPS_RETENTION)) ctx.addIssue({ code: 'custom', path: [name], message: `unknown ops_cleanup target; known: ${Object.keys(OPS_RETENTION).join(', ')}` });
    }
  })
  .transform((days) => ({ ...OPS_RETENTION, ...days }));
const IMAGE_DEFAULTS = {
  provider: { request_timeout: 30_000, download_timeout: 600_000, lookup_pages: 20 },
  prices: {},
  max_prompts: 500,
  max_prompt_chars: 4000,
  max_n: 4,
  max_image_bytes: 8 * 1024 * 1024,
  concurrency: 4,
  poll_interval: 10_000,
  claim_interval: 1000,
  lease: 60_000,
  retry_delay: 60_000,
  stale_timeout: 600_000,
  max_errors: 20,
  input_retention: DAY,
  output_retention: 3 * DAY,
};

const PROBE_DEFAULTS = {
  min_interval: 15_000,
  raw_retention: 2 * DAY,
  rollup_retention: 30 * DAY,
  pool_size: 128,
  claim_batch: 50,
  poll_interval: 250,
  lease_grace: 5000,
  late_after: 1000,
  default_timeout: 10_000,
  account_base_url: 'https://api.openai.com',
};

const AUTH_DEFAULTS = {
  refresh_margin_seconds: 300,
  refresh_enabled: true,
  refresh_concurrency: 2,
  refresh_max_attempts: 5,
  refresh_backoff_base: 5000,
  refresh_backoff_max: 300_000,
  refresh_retry_floor: 1000,
  refresh_recovery_delay: 600_000,
  refresh_request_timeout: 15_000,
  refresh_reply_timeout: 120_000,
  refresh_breaker_threshold: 5,
  refresh_breaker_open: 60_000,
  refresh_lease_ttl: 300_000,
  refresh_shard_backstop: 120_000,
  oauth_401_cooldown: 600_000,
  hot_path_wait: 10_000,
};

/** An OAuth token endpoint. Built-in platforms have defaults (see upstream/oauth-providers.ts); any key here overrides them. */
const providerSchema = z
  .object({
    token_url: providerUrl(/^https?:\/\//, 'expected an http(s) URL', 'client_secret')
      .pipe(z.string().url('expected an http(s) URL'))
      .optional(),
    client_id: z.string().min(1).optional(),
    client_secret: z.string().min(1).optional(),
    max_per_second: numeric(z.number().positive()).optional(),
    // How long the provider still accepts a just-rotated refresh token (Auth0 rotation overlap, Okta grace period); 0 = never.
    reuse_grace: duration.refine((ms) => ms >= 0 && ms <= 3_600_000, { message: 'expected a duration from 0 to 1h' }).optional(),
  })
  .strict();

export const configSchema = z
  .object({
    instance: z
      .object({
        id: z
          .string()
          .regex(/^[A-Za-z0-9._:-]{1,64}$/, 'expected 1-64 characters of letters, digits, . _ : -')
          .optional(),
        env: z
          .string()
          .regex(/^[a-z0-9_-]{1,32}$/, 'expected 1-32 characters of a-z, 0-9, _ or -')
          .optional(),
      })
      .strict()
      .default({}),
    // Slow clients: each limit closes a connection that holds the service without finishing (docs/security.md).
    http: z
      .object({
        host: z.string().default('0.0.0.0'),
        port: port.default(8080),
        admin_token: z.string().min(16, 'expected at least 16 characters').optional(),
        headers_timeout: positiveDuration.default(HTTP_DEFAULTS.headers_timeout),
        request_timeout: positiveDuration.default(HTTP_DEFAULTS.request_timeout),
        keep_alive_timeout: positiveDuration.default(HTTP_DEFAULTS.keep_alive_timeout),
        socket_timeout: positiveDuration.default(HTTP_DEFAULTS.socket_timeout),
        max_connections: positiveInt.default(HTTP_DEFAULTS.max_connections),
      })
      .strict()
      .refine((h) => h.headers_timeout <= h.request_timeout, { message: 'http.headers_timeout must not be longer than http.request_timeout', path: ['headers_timeout'] })
      .default({ host: '0.0.0.0', port: 8080, ...HTTP_DEFAULTS }),
    // The read-only SQL console (POST /api/v1/sql, relay-jobs sql); docs/security.md.
    sql: z
      .object({
        statement_timeout: positiveDuration.default(SQL_DEFAULTS.statement_timeout),
        database_url: z
          .string()
          .regex(/^postgres(ql)?:\/\//, 'expected a postgres:// or postgresql:// URL')
          .optional(),
        concurrency: positiveInt.default(SQL_DEFAULTS.concurrency),
        max_rows: numeric(z.number().int().min(1).max(100_000)).default(SQL_DEFAULTS.max_rows),
        embedded_max_cost: numeric(z.number().positive()).default(SQL_DEFAULTS.embedded_max_cost),
      })
      .strict()
      .default(SQL_DEFAULTS),
    database: z
      .object({
        url: z
          .string()
          .regex(/^postgres(ql)?:\/\//, 'expected a postgres:// or postgresql:// URL')
          .optional(),
        direct_url: z
          .string()
          .regex(/^postgres(ql)?:\/\//, 'expected a postgres:// or postgresql:// URL')
          .optional(),
        data_dir: z.string().min(1).default('./data'),
        pool_size: positiveInt.default(10),
        connect_timeout: positiveDuration.default(5000),
        auto_migrate: z.boolean().default(true),
      })
      .strict()
      .default({ data_dir: './data', pool_size: 10, connect_timeout: 5000, auto_migrate: true }),
    redis: z
      .object({
        url: z
          .string()
          .superRefine((url, ctx) => {
            try {
              parseRedisUrl(url);
            } catch (err) {
              ctx.addIssue({ code: 'custom', message: (err as Error).message });
            }
          })
          .optional(),
        key_prefix: z
          .string()
          .regex(/^[A-Za-z0-9._-]{1,48}$/, 'expected 1-48 characters of letters, digits, . _ -')
          .default('relay-jobs'),
        command_timeout: positiveDuration.default(1000),
      })
      .strict()
      .default({ key_prefix: 'relay-jobs', command_timeout: 1000 }),
    cluster: z
      .object({
        expected_replicas: positiveInt.default(3),
        max_clock_skew: positiveDuration.default(2000),
        instance_heartbeat: positiveDuration.default(5000),
        // job_state and job_runs are not per environment: a replica refuses to join live replicas of another RELAY_JOBS_ENV unless this is true.
        allow_mixed_env: z.boolean().default(false),
        // `session`: a dedicated PostgreSQL session per replica holds a liveness lock, so a crashed holder's lease is taken over at once.
        // `lease`: no detector, a crashed holder's lease expires (use behind a transaction pooler; docs/coordination.md).
        crash_detection: z.enum(['session', 'lease']).default('session'),
      })
      .strict()
      .default({ expected_replicas: 3, max_clock_skew: 2000, instance_heartbeat: 5000, allow_mixed_env: false, crash_detection: 'session' }),
    shutdown: z
      .object({ grace: positiveDuration.default(20_000) })
      .strict()
      .default({ grace: 20_000 }),
    scheduler: z
      .object({ run_retention: positiveDuration.default(7 * 86_400_000), abort_grace: positiveDuration.default(5000), offset_max: duration.default(30_000) })
      .strict()
      .default({ run_retention: 7 * 86_400_000, abort_grace: 5000, offset_max: 30_000 }),
    // format: json (one object per line, for machines) or pretty (colourised lines for a human at a terminal).
    logging: z
      .object({ level: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'), format: z.enum(['json', 'pretty']).default('json') })
      .strict()
      .default({ level: 'info', format: 'json' }),
    // Seed keys (codex-proxy-rs config.yaml). `auth.*` is read by token_refresh.
    auth: z
      .object({
        refresh_margin_seconds: positiveInt.default(300),
        refresh_enabled: z.boolean().default(true),
        refresh_concurrency: positiveInt.default(2),
        // Ours, beyond the seed: retry, recovery and the hot path's guard.
        refresh_max_attempts: positiveInt.default(5),
        refresh_backoff_base: positiveDuration.default(5000),
        refresh_backoff_max: positiveDuration.default(300_000),
        // Deadline-aware retry: the shortest delay between two attempts, however near the token's expiry.
        refresh_retry_floor: positiveDuration.default(1000),
        refresh_recovery_delay: positiveDuration.default(600_000),
        refresh_request_timeout: positiveDuration.default(15_000),
        // Once a refresh request is sent, its reply is awaited this long, never less (a rotated token exists only in the reply).
        refresh_reply_timeout: positiveDuration.default(120_000),
        // Sub2API's per-platform breaker: consecutive provider-side failures that trip it, and how long it stays open.
        refresh_breaker_threshold: positiveInt.default(5),
        refresh_breaker_open: positiveDuration.default(60_000),
        refresh_lease_ttl: positiveDuration.default(300_000),
        // Refresh sharding: a replica that does not own an account refreshes it this much after it is due (the owner normally has).
        refresh_shard_backstop: positiveDuration.default(120_000),
        oauth_401_cooldown: positiveDuration.default(600_000),
        hot_path_wait: positiveDuration.default(10_000),
      })
      .strict()
      .default(AUTH_DEFAULTS),
    oauth: z
      .object({ providers: z.record(z.string().regex(/^[a-z0-9_-]{1,32}$/, 'expected a platform name of 1-32 characters a-z, 0-9, _ or -'), providerSchema).default({}) })
      .strict()
      .default({ providers: {} }),
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
        timezone: z.string().default('UTC'),
        lookback: positiveDuration.default(2 * 3_600_000),
        partitions_ahead: positiveInt.default(3),
        cleanup_every: positiveDuration.default(6 * 3_600_000),
        task_timeout: positiveDuration.default(30 * 60_000),
      })
      .strict()
      .default(USAGE_DEFAULTS),
    idempotency: z
      .object({ ttl: positiveDuration.default(DAY), lock: positiveDuration.default(60_000) })
      .strict()
      .default({ ttl: DAY, lock: 60_000 }),
    quota: z
      .object({ flush_batch: positiveInt.default(1000) })
      .strict()
      .default({ flush_batch: 1000 }),
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
      })
      .strict()
      .default(SNAPSHOT_DEFAULTS),
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
      .default({ currency: 'CNY', reminder_days: [7, 3, 1], order_ttl: 30 * 60_000 }),
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
      .default({ providers: {}, webhook_tolerance: 300_000, request_timeout: 10_000, reconcile_window: 30 * 60_000, batch: 100, retry_base: 60_000 }),
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
          .object({ email: channelRateLimit.default(RATE_LIMIT_DEFAULTS.email), webhook: channelRateLimit.default(RATE_LIMIT_DEFAULTS.webhook) })
          .strict()
          .default(RATE_LIMIT_DEFAULTS),
        max_attempts: positiveInt.default(5),
        retry_base: positiveDuration.default(60_000),
        send_timeout: positiveDuration.default(10_000),
        batch: positiveInt.default(100),
      })
      .strict()
      .default({ per_second: 5, rate_limit: RATE_LIMIT_DEFAULTS, max_attempts: 5, retry_base: 60_000, send_timeout: 10_000, batch: 100 }),
    ops: z
      .object({
        // The collector's bucket: one ops_metrics row per bucket, cluster-wide.
        bucket: duration.refine((ms) => ms >= 1000 && ms <= 3_600_000, { message: 'expected a duration from 1s to 1h' }).default(60_000),
        alert_interval: positiveDuration.default(60_000),
        notify_min_severity: z.enum(['info', 'warning', 'critical']).default('info'),
        alert_recipients: z.array(z.string().min(3)).default([]),
        timezone: z.string().default('UTC'),
        retention_days: retentionDays.default(() => ({ ...OPS_RETENTION })),
      })
      .strict()
      .default({ bucket: 60_000, alert_interval: 60_000, notify_min_severity: 'info', alert_recipients: [], timezone: 'UTC', retention_days: OPS_RETENTION }),
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
        account_base_url: providerUrl(/^https?:\/\/[^\s/]+/, 'expected an http(s) URL', "the account's token").default('https://api.openai.com'),
      })
      .strict()
      .default(PROBE_DEFAULTS),
    scheduled_account_test: z
      .object({ concurrency: positiveInt.default(10), poll_interval: positiveDuration.default(1000), timeout: positiveDuration.default(30_000) })
      .strict()
      .default({ concurrency: 10, poll_interval: 1000, timeout: 30_000 }),
    security: z
      .object({
        master_key: z
          .string()
          .refine((k) => Buffer.from(k, 'base64').length === 32 && /^[A-Za-z0-9+/=_-]+$/.test(k), 'expected 32 random bytes in base64 (e.g. `openssl rand -base64 32`)')
          .optional(),
      })
      .strict()
      .default({}),
    // Paid image batches through an OpenAI-compatible Batch API (batch_image_worker, /api/v1/image-batches).
    image: z
      .object({
        provider: z
          .object({
            base_url: providerUrl(/^https?:\/\/.+\/v1\/?$/, 'expected an http(s) URL ending in /v1', 'image.provider.api_key').optional(),
            api_key: z.string().min(1).optional(),
            request_timeout: positiveDuration.default(30_000),
            // Downloading one output file (streamed; it can be several GB).
            download_timeout: positiveDuration.default(600_000),
            lookup_pages: positiveInt.default(20),
          })
          .strict()
          .default({ request_timeout: 30_000, download_timeout: 600_000, lookup_pages: 20 }),
        prices: z
          .record(
            z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'expected a model name of 1-64 characters of letters, digits, . _ -'),
            z.coerce.number().int('expected an integer price in minor units per image').min(0, 'expected a price of 0 or more minor units'),
          )
          .default({}),
        max_prompts: positiveInt.default(500),
        max_prompt_chars: positiveInt.default(4000),
        max_n: positiveInt.default(4),
        // One decoded image in an output file; with max_n it bounds the output line held while indexing.
        max_image_bytes: positiveInt.default(8 * 1024 * 1024),
        concurrency: positiveInt.default(4),
        poll_interval: positiveDuration.default(10_000),
        claim_interval: positiveDuration.default(1000),
        lease: positiveDuration.default(60_000),
        retry_delay: positiveDuration.default(60_000),
        stale_timeout: positiveDuration.default(600_000),
        max_errors: positiveInt.default(20),
        input_retention: positiveDuration.refine((ms) => ms <= 7 * DAY, 'at most 7d').default(DAY),
        output_retention: positiveDuration.refine((ms) => ms <= 7 * DAY, 'at most 7d').default(3 * DAY),
        storage_dir: z.string().min(1).optional(),
      })
      .strict()
      .superRefine((im, ctx) => {
        if (im.max_n > maxIndexableN(im.max_image_bytes))
          ctx.addIssue({
            code: 'custom',
            path: ['max_n'],
            message: `at most ${maxIndexableN(im.max_image_bytes)} with image.max_image_bytes = ${im.max_image_bytes}: one output line (max_n base64 images) must stay under ${INDEXABLE_LINE_BYTES} bytes to be indexed`,
          });
      })
      .default(IMAGE_DEFAULTS),
    admin: z
      .object({ session_cleanup_interval_secs: positiveInt.default(3600), session_ttl_minutes: positiveInt.default(1440) })
      .strict()
      .default({ session_cleanup_interval_secs: 3600, session_ttl_minutes: 1440 }),
    backup: backupSchema,
    // Each job validates its own section (common keys + its options) against its declaration;
    // an unknown job name is reported by the job registry with the known names.
    jobs: z.record(z.string(), z.record(z.string(), z.unknown())).default({}),
  })
  .strict();

export type ConfigFile = z.infer<typeof configSchema>;

/**
 * zod issues as config problems: `key (source): message`, the key a dotted path under `prefix`.
 * `from` names where a key's value came from (file, variable); unknown keys say so plainly.
 */
export function formatIssues(issues: z.core.$ZodIssue[], prefix: Array<string | number> = [], from: (key: string) => string | undefined = () => undefined): string[] {
  return issues.map((issue) => {
    const path = [...prefix, ...issue.path].map(String);
    const keys = issue.code === 'unrecognized_keys' ? issue.keys.map((k) => [...path, k].join('.')) : [path.join('.')];
    const key = keys.join(', ') || '(top level)';
    const source = from(keys[0]!);
    const message = issue.code === 'unrecognized_keys' ? 'unknown key' : issue.message;
    return source ? `${key} (${source}): ${message}` : `${key}: ${message}`;
  });
}

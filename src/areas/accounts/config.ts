import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { duration, numeric, positiveDuration, positiveInt, providerUrl } from '../../config/fields.js';

const httpUrl = (instead: string) => providerUrl(/^https?:\/\/[^\s/]+/, 'expected an http(s) URL', instead).pipe(z.string().url('expected an http(s) URL'));
/** A base URL paths are appended to: no query or fragment (they would end up in the middle of the request's URL). */
const baseUrl = (instead: string) => httpUrl(instead).refine((u) => !/[?#]/.test(u), 'expected a base URL without ?query or #fragment');

/**
 * One platform's OAuth client and API (providers/registry.ts). Built-in platforms (openai,
 * anthropic, gemini) have every default; any key here overrides it. A platform configured by hand
 * needs token_url and client_id, and speaks like a built-in one (`like`, default openai).
 */
const providerSchema = z
  .object({
    token_url: httpUrl('client_secret').optional(),
    client_id: z.string().min(1).optional(),
    client_secret: z.string().min(1).optional(),
    // How the refresh body is encoded: anthropic json, the others form.
    body: z.enum(['json', 'form'], { message: 'expected json or form' }).optional(),
    // The base URL account tests go to (Codex responses, Claude messages, Gemini Code Assist).
    api_url: baseUrl("the account's token (account tests send it as a header)").optional(),
    // Gemini only: the Generative Language base, for accounts without a Cloud project id.
    generative_url: baseUrl("the account's token").optional(),
    like: z.enum(['openai', 'anthropic', 'gemini'], { message: 'expected openai, anthropic or gemini' }).optional(),
    max_per_second: numeric(z.number().positive()).optional(),
    // How long the provider still accepts a just-rotated refresh token (Auth0 rotation overlap, Okta grace period); 0 = never.
    // Within it a refresh token whose sender died unanswered is presented again; past it a rotating platform's is not (lost-rotation.ts).
    reuse_grace: duration.refine((ms) => ms >= 0 && ms <= 3_600_000, { message: 'expected a duration from 0 to 1h' }).optional(),
  })
  .strict();

/** The accounts area's config sections (keys of the config file), in config.example.yaml order. */
export const accountsConfig = {
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
      // The hot path's token cache (issue 53): how long a replica may serve a token from memory without hearing
      // its own freshness ping back, and how long a disable or new credentials wait before they are acknowledged. 0 = off.
      token_cache_max_age: duration.refine((ms) => ms >= 0 && ms <= 10_000, { message: 'expected a duration from 0 to 10s' }).default(100),
    })
    .strict()
    .prefault({}),
  oauth: z
    .object({ providers: z.record(z.string().regex(/^[a-z0-9_-]{1,32}$/, 'expected a platform name of 1-32 characters a-z, 0-9, _ or -'), providerSchema).default({}) })
    .strict()
    .prefault({}),
};

/**
 * The retry schedule of token refresh, as configured (`auth.refresh_*`), in one place: the
 * refresh timing (refresh-timing.ts) takes its backoff steps from here, and the
 * config check, the start-up check and `relay-jobs doctor` compare the margin with its length.
 */

/** The `auth` keys the retry schedule depends on (a whole `Config` will do). */
export interface RetryScheduleKeys {
  auth: { refresh_margin_seconds: number; refresh_max_attempts: number; refresh_backoff_base: number; refresh_backoff_max: number; refresh_enabled?: boolean };
}

/** The largest factor the seed's jitter applies to a delay (it draws from [0.8, 1.2)). */
export const JITTER_MAX = 1.2;

/** The un-jittered delay after the `failures`-th consecutive transient failure: base × 3^(failures−1), capped at max. */
export function backoffStepMs(failures: number, baseMs: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 3 ** Math.max(0, failures - 1));
}

/**
 * The worst-case length of the retry schedule: from the first failed attempt to the last retry
 * `auth.refresh_max_attempts` allows, every delay at its longest jitter (the provider's own
 * latency per attempt comes on top). A refresh margin shorter than this means a token can expire
 * while its retries would still be waiting, were it not for the deadline-aware retry, which then
 * has to squeeze them together (docs/token-refresh.md, "Retries within the token's life").
 */
export function refreshRetryBudgetMs(config: RetryScheduleKeys): number {
  const a = config.auth;
  let total = 0;
  for (let failures = 1; failures < a.refresh_max_attempts; failures++) total += backoffStepMs(failures, a.refresh_backoff_base, a.refresh_backoff_max) * JITTER_MAX;
  return Math.round(total);
}

/** The config check's warning when `auth.refresh_margin_seconds` is shorter than the retry schedule needs (none when it is not, or refresh is off). */
export function refreshMarginWarnings(config: RetryScheduleKeys): string[] {
  const a = config.auth;
  if (a.refresh_enabled === false) return [];
  const budget = refreshRetryBudgetMs(config);
  if (a.refresh_margin_seconds * 1000 >= budget) return [];
  return [
    `auth.refresh_margin_seconds (${a.refresh_margin_seconds} s) is shorter than the refresh retry schedule needs (${Math.ceil(budget / 1000)} s: ` +
      `${a.refresh_max_attempts} attempts, auth.refresh_backoff_base ${a.refresh_backoff_base / 1000} s tripling up to auth.refresh_backoff_max ${a.refresh_backoff_max / 1000} s, +20% jitter); ` +
      `retries are squeezed into the token's remaining life, so a provider outage near expiry gets fewer, closer attempts. ` +
      `Raise auth.refresh_margin_seconds, or lower auth.refresh_max_attempts / auth.refresh_backoff_base`,
  ];
}

// Its sections in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof accountsConfig> {}
}

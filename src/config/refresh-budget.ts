/**
 * The retry schedule of token refresh, as configured (`auth.refresh_*`), in one place: the
 * refresh timing (jobs/accounts/refresh-timing.ts) takes its backoff steps from here, and the
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

import type { Config } from '../../config/load.js';

/**
 * The worst case of one refresh's retries from the `auth.*` keys: `auth.refresh_max_attempts`
 * attempts, each failing at worst after `auth.refresh_request_timeout`, with the backoff between
 * them (base × 3^(n−1), capped at `auth.refresh_backoff_max`, +20% jitter:
 * jobs/accounts/refresh-timing.ts). A reply that is awaited past the request timeout
 * (`auth.refresh_reply_timeout`, a rotated token exists only in it) is the rare case, not counted.
 *
 * LOCAL STAND-IN: the token-refresh area is getting its own retry-budget function on another
 * branch; when it lands, `refreshMargin` (refresh.ts) calls that one instead of this.
 */
export function retryBudgetMs(config: Config): number {
  const a = config.auth;
  const attempts = a.refresh_max_attempts;
  const perAttempt = a.refresh_request_timeout;
  let backoff = 0;
  for (let n = 1; n < attempts; n++) backoff += Math.min(a.refresh_backoff_max, a.refresh_backoff_base * 3 ** (n - 1)) * 1.2;
  return attempts * perAttempt + Math.round(backoff);
}

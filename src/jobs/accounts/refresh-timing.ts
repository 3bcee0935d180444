import type { Random } from '../../time/clock.js';

/** The seed's jitter: a delay times a uniform factor in [0.8, 1.2). */
export function jitter(ms: number, random: Random): number {
  return Math.round(ms * (0.8 + 0.4 * random()));
}

/**
 * When to refresh a token that expires at `expiresAt`: `margin` before it, the delay jittered
 * 80–120% so accounts added together do not refresh together. Two corrections to the seed's
 * plain formula (which codex-proxy-rs shipped):
 * - the +20% side may not push the refresh past `expiresAt − margin/2`, or a long delay with a
 *   short margin would refresh after the token died;
 * - a token that lives shorter than the margin is refreshed at half its remaining life, not
 *   "now" over and over.
 */
export function nextRefreshAt(nowMs: number, expiresAtMs: number, marginMs: number, random: Random): number {
  const remaining = expiresAtMs - nowMs;
  if (remaining <= 0) return nowMs;
  const delay = remaining - marginMs;
  if (delay <= 0) return nowMs + Math.max(1000, Math.floor(remaining / 2));
  const latest = expiresAtMs - marginMs / 2;
  return Math.min(nowMs + jitter(delay, random), latest);
}

/**
 * Backoff after the `failures`-th consecutive transient failure: base × 3^(failures−1), capped,
 * jittered; a provider's Retry-After wins when it asks for longer.
 */
export function backoffDelay(failures: number, baseMs: number, maxMs: number, random: Random, retryAfterMs: number | null = null): number {
  const exp = Math.min(maxMs, baseMs * 3 ** Math.max(0, failures - 1));
  return Math.max(jitter(exp, random), retryAfterMs ?? 0);
}

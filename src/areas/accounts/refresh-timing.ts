import type { Random } from '../../time/clock.js';
import { backoffStepMs } from '../../config/refresh-budget.js';

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
  return Math.max(jitter(backoffStepMs(failures, baseMs, maxMs), random), retryAfterMs ?? 0);
}

export interface RetryTiming {
  failures: number;
  baseMs: number;
  maxMs: number;
  /** `auth.refresh_retry_floor`: the shortest delay between two attempts, however near the expiry. */
  floorMs: number;
  /** What the provider asked for (Retry-After, or the breaker's remaining open time). */
  retryAfterMs: number | null;
  /** The token's remaining life; null when unknown. */
  remainingMs: number | null;
}

/**
 * Deadline-aware retry (issue 24): the backoff, but never more than half the token's remaining
 * life, so a retry that fails too still leaves time for another, and the delays shrink as the
 * expiry nears; never less than the floor, so the provider is not hammered. While more than the
 * floor remains, the retry is therefore always scheduled before the expiry; within the last
 * floor it comes one floor later (the lapse is shorter than the floor). A provider's Retry-After
 * is obeyed even past the expiry (asking again sooner would only be refused). A token already
 * expired makes the account unusable now: its retries start again from the floor and triple
 * (floor × 3^(n−1), never above the plain backoff); a token of unknown expiry gets the plain backoff.
 */
export function retryDelay(t: RetryTiming, random: Random): number {
  const backoff = jitter(backoffStepMs(t.failures, t.baseMs, t.maxMs), random);
  const asked = t.retryAfterMs ?? 0;
  if (t.remainingMs === null) return Math.max(backoff, asked);
  // Lapsed: the account is down now, so the backoff starts again from the floor (floor × 3^(n−1)).
  const cap = t.remainingMs <= 0 ? jitter(backoffStepMs(t.failures, t.floorMs, t.maxMs), random) : Math.max(t.floorMs, Math.floor(t.remainingMs / 2));
  return Math.max(Math.min(backoff, cap), asked);
}

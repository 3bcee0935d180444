import type { Random } from '../../time/clock.js';
import { backoffStepMs } from './config.js';

/** The seed's jitter: a delay times a uniform factor in [0.8, 1.2). */
export function jitter(ms: number, random: Random): number {
  return Math.round(ms * (0.8 + 0.4 * random()));
}

/**
 * When to refresh a token that expires at `expiresAt`: `margin` before it, the delay jittered
 * so accounts added together do not refresh together. Corrections to the seed's plain formula
 * (80–120%, which codex-proxy-rs shipped):
 * - the jitter only moves a refresh earlier (80–100% of the delay): the seed's +20% side pushed
 *   a refresh into the margin, eating the time its retries need (a short-margin token then
 *   lapsed through three transient failures; test/refresh-deadline.e2e.test.ts), so the whole
 *   margin is always left for retries;
 * - a token already inside its margin is refreshed now, unless it is a short-lived one: a token
 *   that lived no longer than the margin from when it was obtained (`obtainedAt`: the refresh
 *   that stored it, by default now) is refreshed halfway through that life, not "now" over and
 *   over. The halfway point is a property of the token, not of when it is looked at: a replica
 *   that plans it later (a restart, another replica's sync) finds the same time, never a later
 *   one. (Half of whatever life was left at each look moved a restarted replica's refreshes past
 *   the end of the soak, and by its arithmetic a crash loop would have pushed them toward the expiry: bench/soak.ts.)
 *   A token this runtime never refreshed (`obtainedAt` unknown: -Infinity) counts as long-lived.
 */
export function nextRefreshAt(nowMs: number, expiresAtMs: number, marginMs: number, random: Random, obtainedAtMs = nowMs): number {
  const remaining = expiresAtMs - nowMs;
  if (remaining <= 0) return nowMs;
  const delay = remaining - marginMs;
  if (delay > 0) return nowMs + Math.round(delay * (0.8 + 0.2 * random()));
  const life = expiresAtMs - obtainedAtMs;
  if (life > marginMs) return nowMs;
  return Math.max(nowMs, obtainedAtMs + Math.max(1000, Math.floor(life / 2)));
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
  /** Failures since the token expired (the first one after the expiry is 1); absent: all `failures` count. */
  lapsedFailures?: number;
}

/**
 * Deadline-aware retry (issue 24): the backoff, but never more than half the token's remaining
 * life, so a retry that fails too still leaves time for another, and the delays shrink as the
 * expiry nears; never less than the floor, so the provider is not hammered. While more than the
 * floor remains, the retry is therefore always scheduled before the expiry; within the last
 * floor it comes one floor later (the lapse is shorter than the floor). A provider's Retry-After
 * is obeyed even past the expiry (asking again sooner would only be refused). A token already
 * expired makes the account unusable now: its retries start again from the floor and triple
 * (floor × 3^(n−1), n counting the failures since the expiry when the caller knows them, never
 * above the plain backoff): the failures before the expiry were spent keeping it alive, and
 * counting them made the first retry of a dead token wait 3 or 9 floors. A token of unknown
 * expiry gets the plain backoff.
 */
export function retryDelay(t: RetryTiming, random: Random): number {
  const backoff = jitter(backoffStepMs(t.failures, t.baseMs, t.maxMs), random);
  const asked = t.retryAfterMs ?? 0;
  if (t.remainingMs === null) return Math.max(backoff, asked);
  // Lapsed: the account is down now, so the backoff starts again from the floor (floor × 3^(n−1)).
  const cap = t.remainingMs <= 0 ? jitter(backoffStepMs(t.lapsedFailures ?? t.failures, t.floorMs, t.maxMs), random) : Math.max(t.floorMs, Math.floor(t.remainingMs / 2));
  return Math.max(Math.min(backoff, cap), asked);
}

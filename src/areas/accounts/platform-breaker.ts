import type { Clock } from '../../time/clock.js';

/** Transient reasons that say the provider (or the way to it) is failing, not one account. */
const PROVIDER_FAILURES = new Set(['network', 'timeout', 'reply_timeout', 'server_error', 'rate_limited', 'bad_response', 'unrecognized_reply']);
/**
 * Configuration faults that fail every account of the platform alike: trip at once. Others (a
 * request the provider calls malformed, which one account's odd token could cause) count toward
 * the threshold like provider failures, so one account cannot stop its whole platform.
 */
const TRIP_AT_ONCE = new Set(['invalid_client', 'unauthorized_client', 'invalid_request', 'not_found', 'not_found_error']);

/**
 * Sub2API's per-platform breaker: after `threshold` consecutive provider-side failures on one
 * platform, or at once on a configuration fault that fails every account alike (`invalid_client`, a missing client secret, a token URL that answers 404), no refresh of that platform calls
 * the provider for `openMs` (the rest of the cycle); those refreshes are rescheduled, not failed,
 * so a provider outage or a broken client id does not burn every account's retry budget. After
 * `openMs` the next call is a probe: success closes it, a failure opens it again.
 */
export class PlatformBreaker {
  private readonly state = new Map<string, { failures: number; openUntil: number; reason: string }>();

  constructor(
    private readonly clock: Clock,
    private readonly threshold: number,
    private readonly openMs: number,
  ) {}

  /** Ms until the platform's breaker closes, or 0 when calls may go out. */
  openFor(platform: string): { ms: number; reason: string } {
    const s = this.state.get(platform);
    const ms = s ? s.openUntil - this.clock.now() : 0;
    return ms > 0 ? { ms, reason: s!.reason } : { ms: 0, reason: '' };
  }

  /** Every platform whose breaker is open now, with the time left and the failure that tripped it. */
  open(): Array<{ platform: string; ms: number; reason: string }> {
    return [...this.state.keys()].map((platform) => ({ platform, ...this.openFor(platform) })).filter((b) => b.ms > 0);
  }

  /** Feeds one provider call's result; returns true when this result tripped the breaker. */
  record(platform: string, kind: 'ok' | 'transient' | 'permanent' | 'config', reason = ''): boolean {
    const s = this.state.get(platform) ?? { failures: 0, openUntil: 0, reason: '' };
    this.state.set(platform, s);
    if (kind === 'ok' || kind === 'permanent') {
      s.failures = 0;
      return false;
    }
    const now = this.clock.now();
    const trip = (kind === 'config' && TRIP_AT_ONCE.has(reason)) || (((kind === 'transient' && PROVIDER_FAILURES.has(reason)) || kind === 'config') && ++s.failures >= this.threshold);
    if (!trip) return false;
    s.failures = 0;
    s.openUntil = now + this.openMs;
    s.reason = reason;
    return true;
  }
}

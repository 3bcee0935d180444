import { describe, expect, it } from 'vitest';
import { retryDelay } from '../src/areas/accounts/refresh-timing.js';
import { TokenRefreshService } from '../src/areas/accounts/token-refresh-service.js';
import { refreshSettings } from './helpers/refresh-settings.js';
import type { Accounts } from '../src/areas/accounts/store/accounts.js';
import type { Refresher } from '../src/areas/accounts/refresher.js';
import { ManualClock } from '../src/time/clock.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { refreshMarginWarnings, refreshRetryBudgetMs } from '../src/areas/accounts/config.js';
import { lostRotationReason, mayPresentAgain, refreshTokenFingerprint, repeatedSend } from '../src/areas/accounts/lost-rotation.js';

const mid = () => 0.5; // jitter factor 1.0
const worst = () => 0.999_999; // jitter factor ~1.2
const base = { baseMs: 5000, maxMs: 300_000, floorMs: 1000, retryAfterMs: null };

describe('deadline-aware retry delay (issue 24)', () => {
  it('is the plain backoff while the token has time, and half the remaining life once it has not', () => {
    expect(retryDelay({ ...base, failures: 1, remainingMs: 3_600_000 }, mid)).toBe(5000);
    expect(retryDelay({ ...base, failures: 3, remainingMs: 3_600_000 }, mid)).toBe(45_000);
    expect(retryDelay({ ...base, failures: 1, remainingMs: 8000 }, mid)).toBe(4000);
    expect(retryDelay({ ...base, failures: 2, remainingMs: 4000 }, mid)).toBe(2000);
  });

  it('is never scheduled after the expiry while more than the floor remains, and shrinks as the expiry nears', () => {
    for (const failures of [1, 2, 3, 4, 5, 8]) {
      let last = Infinity;
      for (let remaining = 600_000; remaining > base.floorMs; remaining = Math.floor(remaining * 0.7)) {
        for (const random of [() => 0, mid, worst]) {
          const d = retryDelay({ ...base, failures, remainingMs: remaining }, random);
          expect(d, `failures ${failures}, ${remaining} ms left`).toBeLessThan(remaining);
          expect(d).toBeGreaterThanOrEqual(base.floorMs);
        }
        const d = retryDelay({ ...base, failures, remainingMs: remaining }, worst);
        expect(d).toBeLessThanOrEqual(last);
        last = d;
      }
    }
  });

  it('is bounded below by the floor however near the expiry: a provider is not hammered', () => {
    for (const remaining of [1500, 1000, 400, 1]) expect(retryDelay({ ...base, failures: 2, remainingMs: remaining }, () => 0)).toBeGreaterThanOrEqual(1000);
    // Attempts before the expiry from 8 s left, all failing: a handful, not a storm.
    let remaining = 8000;
    let attempts = 0;
    while (remaining > 0) {
      attempts++;
      remaining -= retryDelay({ ...base, failures: attempts, remainingMs: remaining }, worst);
    }
    expect(attempts).toBeLessThanOrEqual(5);
  });

  it('after the expiry restarts from the floor and triples; Retry-After wins; unknown expiry is plain backoff', () => {
    expect([1, 2, 3, 4].map((failures) => retryDelay({ ...base, failures, remainingMs: -1 }, mid))).toEqual([1000, 3000, 9000, 27_000]);
    expect(retryDelay({ ...base, failures: 1, remainingMs: 8000, retryAfterMs: 30_000 }, mid)).toBe(30_000);
    expect(retryDelay({ ...base, failures: 2, remainingMs: null }, mid)).toBe(15_000);
  });

  it('after the expiry counts only the failures since it: the first retry of a dead token waits one floor', () => {
    expect([1, 2, 3].map((lapsedFailures) => retryDelay({ ...base, failures: 3, remainingMs: -1, lapsedFailures }, mid))).toEqual([1000, 3000, 9000]);
  });

  it('the refresh scheduler restarts the count at the expiry (a token that died after two failed retries is retried one floor later)', () => {
    const clock = new ManualClock();
    const settings = refreshSettings({ marginMs: 8000, shardsWaitMs: 1000 });
    const svc = new TokenRefreshService({} as Accounts, {} as Refresher, settings, clock, mid, silentLogger(), new Metrics());
    const fail = (failures: number, expiresInMs: number) => {
      svc.afterOutcome(7, 1, { result: 'transient', reason: 'server_error', detail: '503', retryAfterMs: null, failures, tokenExpiresAt: new Date(clock.now() + expiresInMs) });
      return svc.queue.get(7)!.at - clock.now();
    };
    expect(fail(1, 3000)).toBe(1500); // alive: half the remaining life
    expect(fail(2, -500)).toBe(1000); // first failure after the expiry: one floor (was 3 floors)
    expect(fail(3, -2000)).toBe(3000); // then it triples
    svc.afterOutcome(7, 1, { result: 'refreshed', version: 2, tokenExpiresAt: new Date(clock.now() + 12_000) });
    expect(fail(1, -100)).toBe(1000); // a later lapse counts from its own expiry
  });
});

describe('refreshRetryBudgetMs', () => {
  const auth = { refresh_margin_seconds: 300, refresh_max_attempts: 5, refresh_backoff_base: 5000, refresh_backoff_max: 300_000 };
  it('is the worst-case schedule: every delay between the attempts at +20% jitter', () => {
    expect(refreshRetryBudgetMs({ auth })).toBe(Math.round((5000 + 15_000 + 45_000 + 135_000) * 1.2));
    expect(refreshRetryBudgetMs({ auth: { ...auth, refresh_max_attempts: 1 } })).toBe(0);
    expect(refreshRetryBudgetMs({ auth: { ...auth, refresh_max_attempts: 8, refresh_backoff_max: 60_000 } })).toBe(Math.round((5000 + 15_000 + 45_000 + 60_000 * 4) * 1.2));
  });
  it('the config check warns when the margin is shorter, naming the keys; the defaults do not', () => {
    expect(refreshMarginWarnings({ auth })).toEqual([]);
    const [w] = refreshMarginWarnings({ auth: { ...auth, refresh_margin_seconds: 60 } });
    expect(w).toMatch(/auth\.refresh_margin_seconds \(60 s\) is shorter than the refresh retry schedule needs \(240 s/);
    expect(w).toMatch(/auth\.refresh_max_attempts/);
    expect(refreshMarginWarnings({ auth: { ...auth, refresh_margin_seconds: 60, refresh_enabled: false } })).toEqual([]);
  });
});

describe('a rotation lost in a crash (issue 29)', () => {
  const sent = { at: new Date('2026-12-01T12:00:00Z'), ageMs: 2500, fingerprint: refreshTokenFingerprint('rt_old'), by: 'r2:0b6d3f4e-1111-4222-8333-944455556666' };
  it('fingerprints never contain the token and tell tokens apart', () => {
    expect(sent.fingerprint).not.toContain('rt_old');
    expect(refreshTokenFingerprint('rt_old')).toBe(sent.fingerprint);
    expect(refreshTokenFingerprint('rt_new')).not.toBe(sent.fingerprint);
    expect(repeatedSend(sent, refreshTokenFingerprint('rt_old'))).toBe(sent);
    expect(repeatedSend(sent, refreshTokenFingerprint('rt_new'))).toBeNull();
    expect(repeatedSend(null, sent.fingerprint)).toBeNull();
  });
  it('the expired reason says what happened, how the grace applied, and to re-authorize', () => {
    const within = lostRotationReason({ platform: 'openai', sent, retryAgeMs: 2500, graceMs: 30_000, providerReason: 'invalid_grant' });
    expect(within).toMatch(/^refresh token rotation lost in a crash: a refresh sent at 2026-12-01T12:00:00.000Z by r2:/);
    expect(within).toMatch(/within oauth\.providers\.openai\.reuse_grace \(30 s\)/);
    expect(within).toMatch(/Re-authorize this account/);
    expect(lostRotationReason({ platform: 'openai', sent, retryAgeMs: 45_000, graceMs: 30_000, providerReason: 'refresh_token_reused' })).toMatch(/past oauth\.providers\.openai\.reuse_grace/);
    expect(lostRotationReason({ platform: 'openai', sent, retryAgeMs: 100, graceMs: 0, providerReason: 'invalid_grant' })).toMatch(/reuse_grace is 0/);
  });
  it('a rotating refresh token is presented again only within the reuse grace (issue 53); one that does not rotate always', () => {
    expect(mayPresentAgain({ rotates: true, reuseGraceMs: 0 }, sent)).toBe(false);
    expect(mayPresentAgain({ rotates: true, reuseGraceMs: 30_000 }, sent)).toBe(true);
    expect(mayPresentAgain({ rotates: true, reuseGraceMs: 2000 }, sent)).toBe(false);
    expect(mayPresentAgain({ rotates: false, reuseGraceMs: 0 }, sent)).toBe(true);
    const kept = lostRotationReason({ platform: 'anthropic', sent, retryAgeMs: 2500, graceMs: 2000, providerReason: null });
    expect(kept).toMatch(/^refresh token rotation lost in a crash: .* anthropic refresh tokens are single-use .* so it is not presented again/);
    expect(kept).toMatch(/the send was 2\.5 s old, past oauth\.providers\.anthropic\.reuse_grace \(2 s\)\. Re-authorize this account/);
    expect(kept).toMatch(/enabling the account again lets its refresh token be presented once more$/);
    expect(lostRotationReason({ platform: 'openai', sent, retryAgeMs: 2500, graceMs: 0, providerReason: null })).toMatch(/reuse_grace is 0/);
  });
});

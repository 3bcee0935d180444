import { describe, expect, it } from 'vitest';
import { classifyRefreshReply } from '../src/areas/accounts/providers/refresh-reply.js';
import { parseRetryAfter } from '../src/areas/accounts/providers/error-shapes.js';
import { jwtExpiry, tokenExpiry } from '../src/areas/accounts/jwt.js';
import { backoffDelay, jitter, nextRefreshAt } from '../src/areas/accounts/refresh-timing.js';
import { DueQueue, type DueEntry } from '../src/areas/accounts/due-queue.js';
import { resolveFallback } from '../src/areas/accounts/proxy-expiry.js';
import type { ProxyLink } from '../src/areas/accounts/store/proxies.js';
import { Semaphore } from '../src/workers/semaphore.js';
import { RateLimiter } from '../src/workers/rate-limiter.js';
import { SecretBox } from '../src/store/secret-box.js';
import { ManualClock, settle } from '../src/time/clock.js';
import { Deadline } from '../src/time/deadline.js';

const NOW = Date.UTC(2026, 10, 30, 12);
const jwt = (payload: unknown) => `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.sig`;

describe('reply classification (one result type for the retry logic)', () => {
  // The rules every dialect shares (a hand-configured platform's, or Anthropic's and Google's); per-dialect rules are in providers.test.ts.
  const rules = { bare401IsPermanent: false, metadata: () => ({}) };
  const c = (status: number, body: unknown, retryAfter: string | null = null) => classifyRefreshReply(status, typeof body === 'string' ? body : JSON.stringify(body), { retryAfter }, NOW, rules);
  it('success needs an access token; rotation and expiry are optional', () => {
    const at = jwt({ exp: NOW / 1000 + 600 });
    expect(c(200, { access_token: at, refresh_token: 'rt2', expires_in: 3600 })).toEqual({
      kind: 'ok',
      accessToken: at,
      refreshToken: 'rt2',
      idToken: null,
      expiresAt: new Date(NOW + 3600_000),
      metadata: {},
    });
    expect(c(200, { access_token: at })).toMatchObject({ kind: 'ok', refreshToken: null, expiresAt: new Date(NOW + 600_000) });
    expect(c(200, { access_token: 'opaque' })).toMatchObject({ kind: 'ok', expiresAt: null });
    expect(c(200, { token_type: 'Bearer' })).toMatchObject({ kind: 'transient', reason: 'bad_response' });
    expect(c(200, '<html>')).toMatchObject({ kind: 'transient', reason: 'bad_response', detail: 'reply is not a JSON object' });
    expect(c(200, '[1,2]')).toMatchObject({ kind: 'transient', reason: 'bad_response' });
    expect(c(200, { access_token: '' })).toMatchObject({ kind: 'transient' });
  });
  it('dead refresh tokens are permanent (expired), deactivated accounts are banned', () => {
    for (const error of ['invalid_grant', 'refresh_token_reused', 'refresh_token_expired', 'token_revoked', 'access_denied']) {
      expect(c(400, { error, error_description: 'x' }), error).toMatchObject({ kind: 'permanent', reason: error, accountStatus: 'expired' });
    }
    expect(c(401, { error: 'account_deactivated' })).toMatchObject({ kind: 'permanent', accountStatus: 'banned' });
    expect(c(400, { error: 'invalid_grant', error_description: 'This account has been deactivated' })).toMatchObject({ kind: 'permanent', accountStatus: 'banned' });
    // Nested error objects (Anthropic-style) are read too.
    expect(c(400, { error: { code: 'invalid_grant', message: 'expired' } })).toMatchObject({ kind: 'permanent', reason: 'invalid_grant' });
  });
  it('quota-class replies mark the account quota_exhausted; a bare 400/401 is classified by its status (issue 10)', () => {
    for (const error of ['insufficient_quota', 'quota_exceeded', 'usage_limit_reached']) {
      expect(c(400, { error }), error).toMatchObject({ kind: 'permanent', reason: error, accountStatus: 'quota_exhausted' });
    }
    expect(c(403, { error: 'forbidden', error_description: 'You exceeded your current quota' })).toMatchObject({ kind: 'permanent', accountStatus: 'quota_exhausted' });
    expect(c(400, { error: 'invalid_grant', error_description: 'quota of refresh tokens' })).toMatchObject({ accountStatus: 'expired' });
    expect(c(400, {})).toMatchObject({ kind: 'transient', reason: 'bare_http_400' });
    expect(c(401, '')).toMatchObject({ kind: 'transient', reason: 'bare_http_401' });
    expect(c(401, '<html>login</html>')).toMatchObject({ kind: 'transient', reason: 'unrecognized_reply' });
  });
  it('our client being rejected is config, not the account', () => {
    expect(c(401, { error: 'invalid_client' })).toMatchObject({ kind: 'config', reason: 'invalid_client' });
  });
  it('5xx, 429 and anything unrecognised are transient; only a known error code kills a token', () => {
    expect(c(503, 'upstream down')).toMatchObject({ kind: 'transient', reason: 'server_error' });
    expect(c(429, {}, '7')).toMatchObject({ kind: 'transient', reason: 'rate_limited', retryAfterMs: 7000 });
    expect(c(403, '<html>cloudflare</html>')).toMatchObject({ kind: 'transient', reason: 'unrecognized_reply' });
    expect(c(400, { error: 'brand_new_code' })).toMatchObject({ kind: 'transient', reason: 'unrecognized_error' });
    expect(c(401, {})).toMatchObject({ kind: 'transient' });
  });
  it('Retry-After as seconds or a date, capped at an hour; garbage ignored', () => {
    expect(parseRetryAfter('120', NOW)).toBe(120_000);
    expect(parseRetryAfter(new Date(NOW + 30_000).toUTCString(), NOW)).toBe(30_000);
    expect(parseRetryAfter('999999', NOW)).toBe(3_600_000);
    expect(parseRetryAfter('soon', NOW)).toBeNull();
    expect(parseRetryAfter('-5', NOW)).toBeNull();
  });
});

describe('token expiry', () => {
  it('reads exp from a JWT and nothing from anything else', () => {
    expect(jwtExpiry(jwt({ exp: 1_900_000_000 }))).toEqual(new Date(1_900_000_000_000));
    for (const bad of ['', 'abc', 'a.b', 'a.b.c.d', 'x.!!!.y', jwt({ exp: 'soon' }), jwt({ exp: -1 }), jwt({}), jwt(null), jwt([1]), `a.${Buffer.from('not json').toString('base64url')}.c`]) {
      expect(jwtExpiry(bad), bad).toBeNull();
    }
  });
  it('prefers a sane expires_in over the JWT', () => {
    const at = jwt({ exp: NOW / 1000 + 60 });
    expect(tokenExpiry(at, 120, NOW)).toEqual(new Date(NOW + 120_000));
    expect(tokenExpiry(at, 'x', NOW)).toEqual(new Date(NOW + 60_000));
    expect(tokenExpiry(at, -5, NOW)).toEqual(new Date(NOW + 60_000));
    expect(tokenExpiry('opaque', undefined, NOW)).toBeNull();
  });
});

describe('refresh timing', () => {
  const margin = 300_000;
  it('jitter stays within 80–120%', () => {
    expect(jitter(100_000, () => 0)).toBe(80_000);
    expect(jitter(100_000, () => 0.5)).toBe(100_000);
    expect(jitter(100_000, () => 0.999999)).toBeLessThanOrEqual(120_000);
    for (let i = 0; i < 1000; i++) {
      const j = jitter(10_000, Math.random);
      expect(j).toBeGreaterThanOrEqual(8000);
      expect(j).toBeLessThanOrEqual(12_000);
    }
  });
  it('refreshes at expiry − margin, never after expiry − margin/2, and short-lived tokens at half-life', () => {
    const exp = NOW + 3_600_000;
    expect(nextRefreshAt(NOW, exp, margin, () => 0.5)).toBe(NOW + 0.9 * (3_600_000 - margin));
    expect(nextRefreshAt(NOW, exp, margin, () => 0)).toBe(NOW + 0.8 * (3_600_000 - margin));
    expect(nextRefreshAt(NOW, exp, margin, () => 0.99999)).toBeLessThanOrEqual(exp - margin);
    expect(nextRefreshAt(NOW, exp, margin, () => 0.99999)).toBeGreaterThan(exp - margin - 1000);
    expect(nextRefreshAt(NOW, NOW + 200_000, margin, () => 0.5)).toBe(NOW + 100_000);
    expect(nextRefreshAt(NOW, NOW + 1500, margin, () => 0.5)).toBe(NOW + 1000);
    expect(nextRefreshAt(NOW, NOW - 1, margin, () => 0.5)).toBe(NOW);
  });
  it('backoff: 5, 15, 45, 135 s, capped, jittered; Retry-After wins when longer', () => {
    expect([1, 2, 3, 4].map((n) => backoffDelay(n, 5000, 300_000, () => 0.5))).toEqual([5000, 15_000, 45_000, 135_000]);
    expect(backoffDelay(9, 5000, 300_000, () => 0.5)).toBe(300_000);
    expect(backoffDelay(1, 5000, 300_000, () => 0)).toBe(4000);
    expect(backoffDelay(1, 5000, 300_000, () => 0.5, 60_000)).toBe(60_000);
  });
});

describe('DueQueue (one timer for every account)', () => {
  it('fires in due order, honours reschedule and cancel, and keeps one timer', async () => {
    const clock = new ManualClock(NOW);
    const fired: DueEntry[] = [];
    const q = new DueQueue(clock, (e) => fired.push(e));
    for (let i = 1; i <= 100; i++) q.schedule({ id: i, at: NOW + ((i * 7919) % 100) * 1000, kind: 'refresh', version: 1 });
    await settle(); // the queue's loop arms its timer after the wake-ups' one coalesced tick
    expect(clock.pending).toBe(1);
    q.schedule({ id: 5, at: NOW + 500_000, kind: 'retry', version: 1 }); // moved later
    q.cancel(6);
    await clock.advance(100_000);
    expect(fired.map((e) => e.id)).not.toContain(5);
    expect(fired.map((e) => e.id)).not.toContain(6);
    expect(fired).toHaveLength(98);
    const ats = fired.map((e) => e.at);
    expect(ats).toEqual([...ats].sort((a, b) => a - b));
    for (const e of fired) expect(e.at).toBeLessThanOrEqual(NOW + 100_000);
    await clock.advance(400_000);
    expect(fired.at(-1)).toMatchObject({ id: 5, kind: 'retry' });
    expect(q.size).toBe(0);
    expect(clock.pending).toBe(0);
  });
  it('an earlier entry re-arms the timer; far due times do not overflow setTimeout', async () => {
    const clock = new ManualClock(NOW);
    const fired: number[] = [];
    const q = new DueQueue(clock, (e) => fired.push(e.id));
    q.schedule({ id: 1, at: NOW + 40 * 86_400_000, kind: 'refresh', version: 1 });
    q.schedule({ id: 2, at: NOW + 1000, kind: 'refresh', version: 1 });
    await clock.advance(1000);
    expect(fired).toEqual([2]);
    await clock.advance(40 * 86_400_000);
    expect(fired).toEqual([2, 1]);
  });
  it('stop (the loop block): no entry fires after it, no timer is left, nothing is reported undone', async () => {
    const clock = new ManualClock(NOW);
    const fired: number[] = [];
    const q = new DueQueue(clock, (e) => fired.push(e.id));
    q.schedule({ id: 1, at: NOW + 1000, kind: 'refresh', version: 1 });
    await clock.advance(0);
    expect(clock.pending).toBe(1);
    expect(await q.stop(Deadline.within(clock, 100))).toBe(0);
    q.schedule({ id: 2, at: NOW + 1000, kind: 'refresh', version: 1 });
    await clock.advance(10_000);
    expect(fired).toEqual([]);
    expect(clock.pending).toBe(0);
  });
  it('compacts when rescheduling leaves many stale heap entries', async () => {
    const clock = new ManualClock(NOW);
    const fired: number[] = [];
    const q = new DueQueue(clock, (e) => fired.push(e.id));
    for (let round = 0; round < 50; round++) for (let i = 0; i < 100; i++) q.schedule({ id: i, at: NOW + 1000 + round, kind: 'refresh', version: round });
    expect((q as unknown as { heap: unknown[] }).heap.length).toBeLessThan(5 * 100 + 1100);
    await clock.advance(2000);
    expect(fired.sort((a, b) => a - b)).toEqual([...Array(100).keys()]);
  });
});

describe('proxy fallback chain', () => {
  const link = (id: number, over: Partial<ProxyLink> = {}): [number, ProxyLink] => [id, { id, status: 'active', expiresAt: null, fallbackMode: 'proxy', backupProxyId: null, ...over }];
  const past = new Date(NOW - 1000);
  it('walks to the first live proxy, stops on loops and dead ends, honours direct and none', () => {
    const links = new Map([
      link(1, { backupProxyId: 2, status: 'expired' }),
      link(2, { backupProxyId: 3, expiresAt: past }),
      link(3),
      link(4, { fallbackMode: 'direct' }),
      link(5, { fallbackMode: 'none' }),
    ]);
    expect(resolveFallback(links, 1, NOW)).toEqual({ kind: 'proxy', id: 3 });
    expect(resolveFallback(links, 4, NOW)).toEqual({ kind: 'direct' });
    expect(resolveFallback(links, 5, NOW)).toMatchObject({ kind: 'none' });
    const loop = new Map([link(1, { backupProxyId: 2 }), link(2, { backupProxyId: 3, status: 'disabled' }), link(3, { backupProxyId: 1, status: 'expired' })]);
    expect(resolveFallback(loop, 1, NOW)).toMatchObject({ kind: 'none', reason: expect.stringMatching(/loops back to proxy 1/) });
    const self = new Map([link(7, { backupProxyId: 7 })]);
    expect(resolveFallback(self, 7, NOW)).toMatchObject({ kind: 'none' });
    const end = new Map([link(1, { backupProxyId: 9 })]);
    expect(resolveFallback(end, 1, NOW)).toMatchObject({ kind: 'none', reason: expect.stringMatching(/no live proxy/) });
  });
});

describe('concurrency and rate limits', () => {
  it('the semaphore serves urgent waiters first', async () => {
    const s = new Semaphore(1);
    await s.acquire();
    const order: string[] = [];
    const a = s.acquire().then(() => order.push('normal'));
    const b = s.acquire(true).then(() => order.push('urgent'));
    s.release();
    await b;
    s.release();
    await a;
    expect(order).toEqual(['urgent', 'normal']);
  });
  it('a promoted waiter overtakes the normal queue', async () => {
    const s = new Semaphore(1);
    await s.acquire();
    const order: string[] = [];
    void s.ticket().granted.then(() => order.push('first normal'));
    const late = s.ticket();
    void late.granted.then(() => order.push('promoted'));
    late.promote();
    s.release();
    await new Promise((r) => setImmediate(r));
    s.release();
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(['promoted', 'first normal']);
  });
  it('the rate limiter lets a burst through, then one permit per 1/rate seconds', async () => {
    const clock = new ManualClock(NOW);
    const rl = new RateLimiter(clock, 2);
    const times: number[] = [];
    const all = Array.from({ length: 6 }, () => rl.take().then(() => times.push(clock.now() - NOW)));
    for (let i = 0; i < 30; i++) await clock.advance(100);
    await Promise.all(all);
    expect(times.slice(0, 2)).toEqual([0, 0]);
    for (let i = 2; i < 6; i++) expect(times[i]! - times[i - 1]!).toBeGreaterThanOrEqual(400);
    expect(times[5]).toBeLessThanOrEqual(2100);
  });
});

describe('SecretBox', () => {
  const box = SecretBox.fromBase64(Buffer.alloc(32, 1).toString('base64'));
  it('round-trips, binds the purpose, refuses another key, never shows the plaintext', () => {
    const sealed = box.seal('rt_secret', 'account-credentials');
    expect(sealed).not.toContain('rt_secret');
    expect(box.open(sealed, 'account-credentials')).toBe('rt_secret');
    expect(() => box.open(sealed, 'proxy-url')).toThrow(/cannot decrypt/);
    const other = SecretBox.fromBase64(Buffer.alloc(32, 2).toString('base64'));
    expect(() => other.open(sealed, 'account-credentials')).toThrow(/wrong RELAY_JOBS_MASTER_KEY/);
    expect(other.fingerprint).not.toBe(box.fingerprint);
    expect(() => SecretBox.fromBase64('c2hvcnQ=')).toThrow(/32 random bytes/);
    expect(() => box.open('garbage', 'account-credentials')).toThrow(/unknown format/);
  });
});

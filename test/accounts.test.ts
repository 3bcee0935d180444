import { pace } from './helpers/wait.js';
import { refreshSettings } from './helpers/refresh-settings.js';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { ManualClock } from '../src/time/clock.js';
import { RefreshLeases } from '../src/areas/accounts/store/refresh-lease.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { ConnectProxy } from './fixtures/connect-proxy.js';
import { captureLogs } from './helpers/log-capture.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { AccountMetrics } from '../src/areas/accounts/metrics.js';
import { Deadline } from '../src/time/deadline.js';

const ADMIN = 'accounts-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
const MARGIN_S = 300;

/**
 * Token refresh, the hot path and account/proxy expiry on real PostgreSQL and Redis, against a
 * real OAuth server on loopback. The runtime's clock is manual (started at the real time, since
 * the fake server's JWTs carry real `exp`), so due times, backoff and cooldowns are exact.
 */
describe('accounts and token refresh (real PostgreSQL, Redis, OAuth server)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let oauth: FakeOAuthServer;
  let rt: Runtime;
  let http: FastifyInstance;
  let clock: ManualClock;
  let logs: ReturnType<typeof captureLogs>;
  const prefix = uniqueName('rjacc');
  let random = 0.5;

  beforeAll(async () => {
    db = await freshDatabase();
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    oauth = await FakeOAuthServer.start();
    clock = new ManualClock(Date.now());
    logs = captureLogs('acc');
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'acc-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'test-client',
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__MAX_PER_SECOND: '1000',
        RELAY_JOBS__OAUTH__PROVIDERS__ACME__TOKEN_URL: oauth.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__ACME__CLIENT_ID: 'wrong-client',
        RELAY_JOBS__AUTH__REFRESH_REQUEST_TIMEOUT: '500ms',
        RELAY_JOBS__AUTH__REFRESH_REPLY_TIMEOUT: '1s',
        // The classification cases fail one provider call after another on purpose: keep the platform breaker out of it.
        RELAY_JOBS__AUTH__REFRESH_BREAKER_THRESHOLD: '1000',
        RELAY_JOBS__AUTH__HOT_PATH_WAIT: '2s',
      },
    });
    rt = await Runtime.create(config, { clock, random: () => random, logger: logs.logger });
    // The runtime is never started, so no instance heartbeat ever answers with the refresh member
    // list, and the first `sync()` would wait out its 11 s (2 × the 5 s heartbeat + 1 s) for it.
    // Give it the list a beat of this lone replica would bring: itself. It owns every account,
    // exactly as it does while the list is unknown, so no schedule below changes.
    rt.memberships.get('token_refresh').update(['acc-1']);
    http = buildHttpServer(rt);
  });
  afterAll(async () => {
    await rt.shutdown();
    await http.close();
    await oauth.close();
    await sql.end();
    await db.drop();
    await dropRedisPrefix(prefix);
  });
  afterEach(() => {
    random = 0.5;
  });

  async function createAccount(name: string, extra: Record<string, unknown> = {}, lifetimeSec = 3600) {
    const creds = oauth.issue(name, lifetimeSec);
    const res = await http.inject({ method: 'POST', url: '/api/v1/accounts', headers: auth, payload: { platform: 'openai', name, credentials: creds, ...extra } });
    expect(res.statusCode, res.body).toBe(201);
    return { ...res.json(), creds } as { id: number; token_version: number; token_expires_at: string | null; creds: { access_token: string; refresh_token: string }; [k: string]: unknown };
  }
  /** A second scheduler on the same store and refresher: what a restarted replica plans, on the test's clock. */
  async function restartedScheduler() {
    const { TokenRefreshService } = await import('../src/areas/accounts/token-refresh-service.js');
    return new TokenRefreshService(
      rt.services.accounts,
      rt.services.tokenRefresh.refresher,
      refreshSettings({ marginMs: MARGIN_S * 1000, shardsWaitMs: 0 }),
      clock,
      () => 0.5,
      logs.logger,
      rt.metrics,
    );
  }
  const get = async (id: number) => (await http.inject({ url: `/api/v1/accounts/${id}`, headers: auth })).json();
  const post = (url: string, payload?: unknown) => http.inject({ method: 'POST', url, headers: auth, payload: payload as object });

  it('creates an account without ever returning or storing a token in the clear', async () => {
    const a = await createAccount('alice');
    expect(a).toMatchObject({ platform: 'openai', name: 'alice', status: 'active', schedulable: true, has_refresh_token: true, token_version: 1 });
    expect(Date.parse(a.token_expires_at as string)).toBeGreaterThan(Date.now() + 3500_000);
    const text = JSON.stringify(a);
    const { creds } = a;
    expect(text.replace(JSON.stringify(creds), '')).not.toContain(creds.refresh_token);
    for (const body of [JSON.stringify(await get(a.id)), (await http.inject({ url: '/api/v1/accounts', headers: auth })).body]) {
      expect(body).not.toContain(creds.access_token);
      expect(body).not.toContain(creds.refresh_token);
    }
    const row = (await sql.query(`SELECT credentials_sealed FROM accounts WHERE id = $1`, [a.id])).rows[0];
    expect(row.credentials_sealed).toMatch(/^v1:/);
    expect(row.credentials_sealed).not.toContain(creds.refresh_token.slice(3));
  });

  it('admin refresh rotates the refresh token once, bumps the version and records the bookkeeping', async () => {
    const a = await createAccount('bob');
    const before = oauth.requests.length;
    const res = await post(`/api/v1/accounts/${a.id}/refresh`);
    expect(res.json()).toMatchObject({ result: 'refreshed' });
    expect(oauth.requests.length - before).toBe(1);
    expect(oauth.requests.at(-1)).toEqual({ grant_type: 'refresh_token', client_id: 'test-client', refresh_token: a.creds.refresh_token });
    const after = await get(a.id);
    expect(after).toMatchObject({ status: 'active', token_version: 2, refresh: { consecutive_failures: 0, last_error: null } });
    expect(after.refresh.last_success_at).not.toBeNull();
    // The stored refresh token is the rotated one: the next refresh presents it, not the old.
    const rotated = oauth.liveTokenOf('bob');
    expect(rotated).toBeDefined();
    expect(rotated).not.toBe(a.creds.refresh_token);
    await post(`/api/v1/accounts/${a.id}/refresh`);
    expect(oauth.requests.at(-1)!.refresh_token).toBe(rotated);
    expect(oauth.reuses).toBe(0);
    expect((await get(a.id)).token_version).toBe(3);
  });

  it('a refresh costs three PostgreSQL statements: begin (read + lease + stamp), the request recorded before it is sent, and the write that releases the lease', async () => {
    const a = await createAccount('three-statements');
    const q0 = rt.db.stats.queries;
    expect((await rt.services.tokenRefresh.refreshNow(a.id, 'admin', a.token_version)).result).toBe('refreshed');
    expect(rt.db.stats.queries - q0).toBe(3);
    // The record of the request in flight is gone with the write that stored its answer.
    expect((await sql.query(`SELECT refresh_sent_at, refresh_sent_fp FROM accounts WHERE id = $1`, [a.id])).rows[0]).toEqual({ refresh_sent_at: null, refresh_sent_fp: null });
    const leases = await sql.query(`SELECT count(*)::int AS n FROM account_refresh_leases WHERE account_id = $1`, [a.id]);
    expect(leases.rows[0].n).toBe(0);
    expect(await get(a.id)).toMatchObject({ status: 'active', token_version: 2 });
  });

  it('classifies provider replies: permanent errors set the status at once and stop refreshing; transient ones back off', async () => {
    const svc = rt.services.tokenRefresh;
    const cases: Array<[import('./fixtures/oauth-server.js').Fault, string, string, string | null]> = [
      ['invalid_grant', 'permanent', 'expired', 'invalid_grant'],
      ['banned', 'permanent', 'banned', 'account_deactivated'],
      ['500', 'transient', 'active', 'server_error'],
      ['429', 'transient', 'active', 'rate_limited'],
      ['garbage', 'transient', 'active', 'bad_response'],
      ['no_access_token', 'transient', 'active', 'bad_response'],
      ['unknown_400', 'transient', 'active', 'unrecognized_error'],
      ['timeout', 'transient', 'active', 'reply_timeout'],
    ];
    for (const [fault, result, status, error] of cases) {
      const a = await createAccount(`classify-${fault}`);
      const hits = result === 'permanent' ? 2 : 1;
      oauth.fail(fault, hits, (rt) => rt === a.creds.refresh_token);
      if (hits === 2) {
        // The seed's rule: a permanent-looking reply is final on the second consecutive hit, not the first.
        const first = await svc.refreshNow(a.id, 'admin', a.token_version);
        expect(first, fault).toMatchObject({ result: 'transient', reason: error });
        expect((await get(a.id)).status, fault).toBe('active');
      }
      const out = await svc.refreshNow(a.id, 'admin', a.token_version);
      expect(out.result, fault).toBe(result);
      const view = await get(a.id);
      expect(view.status, fault).toBe(status);
      expect(view.refresh.last_error, fault).toBe(error);
      expect(view.refresh.consecutive_failures, fault).toBe(hits);
      const entry = svc.queue.get(a.id);
      if (result === 'permanent') {
        expect(entry, fault).toBeUndefined();
        expect(view.status_reason).toBeTruthy();
      } else {
        // Backoff after the first failure: 5 s base, jittered 80-120% (random = 0.5 → exactly 5 s); 429's Retry-After of 2 s is shorter.
        expect(entry, fault).toMatchObject({ kind: 'retry' });
        expect(entry!.at - clock.now(), fault).toBe(5000);
      }
    }
  });

  it('invalid_client is our configuration, not the account: no status change, a recovery attempt later', async () => {
    const creds = oauth.issue('acme-1');
    const created = await post('/api/v1/accounts', { platform: 'acme', name: 'acme-1', credentials: creds });
    const a = created.json();
    const out = await rt.services.tokenRefresh.refreshNow(a.id, 'admin', a.token_version);
    expect(out).toMatchObject({ result: 'config', reason: 'invalid_client' });
    expect((await get(a.id)).status).toBe('active');
    expect(rt.services.tokenRefresh.queue.get(a.id)).toMatchObject({ kind: 'recovery' });
    expect(rt.services.tokenRefresh.queue.get(a.id)!.at - clock.now()).toBe(600_000);
    expect(logs.text()).toMatch(/check oauth\.providers\.acme\.client_id/);
  });

  it('after the last attempt, a recovery attempt in 10 min ±20%; success clears the failures', async () => {
    const svc = rt.services.tokenRefresh;
    const a = await createAccount('flaky');
    oauth.fail('500', 5, (rt) => rt === a.creds.refresh_token);
    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      const out = await svc.refreshNow(a.id, 'retry', a.token_version);
      expect(out.result, JSON.stringify(out)).toBe('transient');
      delays.push(svc.queue.get(a.id)!.at - clock.now());
    }
    expect(delays).toEqual([5000, 15_000, 45_000, 135_000, 600_000]);
    expect(svc.queue.get(a.id)!.kind).toBe('recovery');
    random = 0;
    oauth.fail('500', 1, (rt) => rt === a.creds.refresh_token);
    await svc.refreshNow(a.id, 'admin', a.token_version);
    expect(svc.queue.get(a.id)!.at - clock.now()).toBe(480_000);
    // A recovery attempt right after any replica's attempt is skipped and put off, not dropped.
    const skipped = await svc.refreshNow(a.id, 'recovery', a.token_version);
    expect(skipped).toMatchObject({ result: 'skipped', reason: 'recently_attempted' });
    expect(svc.queue.get(a.id)).toMatchObject({ kind: 'recovery' });
    random = 0.999999;
    oauth.fail('500', 1, (rt) => rt === a.creds.refresh_token);
    await svc.refreshNow(a.id, 'admin', a.token_version);
    expect(svc.queue.get(a.id)!.at - clock.now()).toBe(720_000);
    const ok = await svc.refreshNow(a.id, 'admin', a.token_version);
    expect(ok.result).toBe('refreshed');
    expect((await get(a.id)).refresh).toMatchObject({ consecutive_failures: 0, last_error: null });
    expect(svc.queue.get(a.id)!.kind).toBe('refresh');
  });

  it('schedules at expiry − margin, jittered 80–100% (never into the margin), and picks up new accounts on sync', async () => {
    const svc = rt.services.tokenRefresh;
    const a = await createAccount('sched-1h', {}, 3600);
    const b = await createAccount('sched-10m', {}, 600);
    const c = await createAccount('sched-2m', {}, 120);
    const atFor = async (r: number, id: number) => {
      random = r;
      svc.queue.cancel(id);
      await rt.services.accounts.update(id, { name: `touched-${r}-${id}` });
      await svc.sync();
      return svc.queue.get(id)!.at - clock.now();
    };
    const exp = (x: { token_expires_at: unknown }) => Date.parse(String(x.token_expires_at)) - clock.now();
    const delayA = exp(a) - MARGIN_S * 1000;
    expect(await atFor(0, a.id)).toBeCloseTo(0.8 * delayA, -2);
    expect(await atFor(0.5, a.id)).toBeCloseTo(0.9 * delayA, -2);
    // The jitter only moves a refresh earlier: the whole margin is left for retries.
    expect(await atFor(0.999, a.id)).toBeLessThanOrEqual(delayA);
    expect(await atFor(0.999, a.id)).toBeCloseTo(0.9998 * delayA, -2);
    // 10-minute token: due in 5 min, jitter bounds.
    const delayB = exp(b) - MARGIN_S * 1000;
    expect(await atFor(0, b.id)).toBeCloseTo(0.8 * delayB, -2);
    // A token already inside its margin that this runtime never refreshed (imported, restored) is due now.
    expect(await atFor(0.5, c.id)).toBe(0);
    // Sync without changes keeps the timers as they are (no re-jitter).
    const before = svc.queue.get(a.id)!.at;
    random = 0;
    await svc.sync();
    expect(svc.queue.get(a.id)!.at).toBe(before);
  });

  it('a short-lived token is refreshed halfway through its life, and a replica planning it later (a restart) finds that same time', async () => {
    const lifetimeOf = oauth.opts.lifetimeOf;
    oauth.opts.lifetimeOf = (subject) => (subject === 'short-lived' ? 120 : lifetimeOf(subject));
    const restarted = await restartedScheduler();
    try {
      const a = await createAccount('short-lived');
      const svc = rt.services.tokenRefresh;
      expect((await svc.refreshNow(a.id, 'admin', a.token_version)).result).toBe('refreshed');
      const obtained = clock.now();
      // 120 s of life against a 300 s margin: halfway, not now (that would loop).
      expect(svc.queue.get(a.id)).toMatchObject({ kind: 'refresh', at: obtained + 60_000 });
      svc.queue.cancel(a.id); // this test drives the clock past the halfway point: only the plans are compared
      await clock.advance(40_000);
      await restarted.sync();
      // The same halfway point, not half of the 80 s left at this look (which kept moving a restarted replica's refreshes later).
      expect(restarted.queue.get(a.id)).toMatchObject({ kind: 'refresh', at: obtained + 60_000 });
      restarted.queue.cancel(a.id);
      await clock.advance(30_000);
      const again = await restartedScheduler();
      try {
        await again.sync();
        expect(again.queue.get(a.id)!.at).toBe(clock.now()); // past the halfway point: now
      } finally {
        void again.queue.stop(Deadline.within(clock, 0));
      }
    } finally {
      oauth.opts.lifetimeOf = lifetimeOf;
      void restarted.queue.stop(Deadline.within(clock, 0)); // not stop(): the refresher is shared with the runtime
    }
  });

  it('timers fire: the scheduler refreshes a due account on the manual clock and arms the next refresh', async () => {
    const svc = rt.services.tokenRefresh;
    const a = await createAccount('fires', {}, 400);
    await svc.sync();
    const entry = svc.queue.get(a.id)!;
    expect(entry.kind).toBe('refresh');
    // Other tests' accounts may fall due on the way; only this account's calls count.
    const calls = () => oauth.requests.filter((r) => r.refresh_token === a.creds.refresh_token).length;
    await clock.advance(entry.at - clock.now() - 1);
    // The manual clock fires due timers inside advance(): a timer fired early would have taken the entry off the queue.
    expect(svc.queue.get(a.id)).toBe(entry);
    expect(svc.refresher.isInFlight(a.id)).toBe(false);
    expect(calls()).toBe(0);
    await clock.advance(1);
    // The stored rotation, the re-armed timer and its log line land one after the other: wait for each, not just the first.
    await vi.waitFor(async () => expect((await get(a.id)).token_version).toBe(2), { timeout: 30_000 });
    await vi.waitFor(() => expect(svc.queue.get(a.id)).toMatchObject({ kind: 'refresh', version: 2 }), { timeout: 30_000 });
    await vi.waitFor(() => expect(logs.lines.some((l) => l.msg === 'Next refresh scheduled' && l.account_id === a.id && typeof l.delay_secs === 'number')).toBe(true), { timeout: 30_000 });
  });

  it('crash recovery: accounts left refreshing, and expired ones with a refresh token, get a staggered recovery attempt at start', async () => {
    const a = await createAccount('left-refreshing');
    const b = await createAccount('left-expired');
    await sql.query(`UPDATE accounts SET status = 'refreshing', status_before_refresh = 'active' WHERE id = $1`, [a.id]);
    await sql.query(`UPDATE accounts SET status = 'expired' WHERE id = $1`, [b.id]);
    // A restart keeps the backoff: the failure count and last attempt are on the account.
    const c = await createAccount('failing-before-restart');
    const d = await createAccount('exhausted-before-restart');
    const lastAttempt = new Date(clock.now());
    await sql.query(`UPDATE accounts SET refresh_failures = 2, last_refresh_attempt_at = $2 WHERE id = $1`, [c.id, lastAttempt]);
    await sql.query(`UPDATE accounts SET refresh_failures = 5, last_refresh_attempt_at = $2 WHERE id = $1`, [d.id, lastAttempt]);
    const fresh = await restartedScheduler();
    try {
      await fresh.sync();
      // Left refreshing with no lease behind it: a dead process's, taken over at once (issue 29).
      expect(fresh.queue.get(a.id)).toMatchObject({ kind: 'takeover' });
      expect(fresh.queue.get(b.id)).toMatchObject({ kind: 'recovery' });
      expect(fresh.queue.get(b.id)!.at - clock.now()).toBeGreaterThanOrEqual(30_000 * 0.8);
      expect(fresh.queue.get(c.id)).toMatchObject({ kind: 'retry', at: lastAttempt.getTime() + 15_000 });
      expect(fresh.queue.get(d.id)).toMatchObject({ kind: 'recovery', at: lastAttempt.getTime() + 600_000 });
      const out = await fresh.refreshNow(b.id, 'recovery', b.token_version);
      expect(out.result).toBe('refreshed');
      expect((await get(b.id)).status).toBe('active');
      // A second recovery right after an attempt (another replica's, say) is skipped.
      await sql.query(`UPDATE accounts SET status = 'expired' WHERE id = $1`, [b.id]);
      const again = await fresh.refreshNow(b.id, 'recovery', (await get(b.id)).token_version);
      expect(again).toMatchObject({ result: 'skipped', reason: 'recently_attempted' });
    } finally {
      void fresh.queue.stop(Deadline.within(clock, 0)); // not fresh.stop(): the refresher is shared with the runtime
    }
  });

  it('the account lease makes a second holder skip (lease_held), with Redis up or down, and no provider call', async () => {
    const a = await createAccount('leased');
    const other = new RefreshLeases(rt.db, null, { prefix, env: 'test' }, 'other-replica', 60_000);
    const held = await other.acquire(a.id);
    expect(held.acquired).toBe(true);
    const before = oauth.requests.length;
    const out = await rt.services.tokenRefresh.refreshNow(a.id, 'admin', a.token_version);
    expect(out).toMatchObject({ result: 'lease_held', heldIn: 'postgres' });
    expect(oauth.requests.length).toBe(before);
    expect(rt.services.tokenRefresh.queue.get(a.id)).toMatchObject({ kind: 'recheck' });
    if (held.acquired) await held.handle.release();
    // Held in Redis by another replica: skipped before PostgreSQL is even asked.
    const viaRedis = new RefreshLeases(rt.db, rt.redis, { prefix, env: 'test' }, 'redis-replica', 60_000);
    const r = await viaRedis.acquire(a.id);
    expect(r.acquired && r.handle.redis).toBe(true);
    expect(await rt.services.tokenRefresh.refreshNow(a.id, 'admin', a.token_version)).toMatchObject({ result: 'lease_held', heldIn: 'redis' });
    if (r.acquired) await r.handle.release();
    // A replica whose Redis is down still takes the PostgreSQL lease, and that alone keeps us out.
    const { Redis } = await import('ioredis');
    const deadRedis = new Redis('redis://127.0.0.1:1', { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
    deadRedis.on('error', () => undefined);
    let redisErrors = 0;
    const cutOff = new RefreshLeases(rt.db, deadRedis, { prefix, env: 'test' }, 'cut-off-replica', 60_000, () => redisErrors++);
    const c = await cutOff.acquire(a.id);
    expect(c.acquired && !c.handle.redis).toBe(true);
    expect(redisErrors).toBe(1);
    expect(await rt.services.tokenRefresh.refreshNow(a.id, 'admin', a.token_version)).toMatchObject({ result: 'lease_held', heldIn: 'postgres' });
    if (c.acquired) await c.handle.release();
    deadRedis.disconnect();
    // Our own process never holds a lease it cannot re-enter; after release the refresh goes through.
    expect((await rt.services.tokenRefresh.refreshNow(a.id, 'admin', a.token_version)).result).toBe('refreshed');
    const leases = await sql.query(`SELECT count(*)::int AS n FROM account_refresh_leases WHERE account_id = $1`, [a.id]);
    expect(leases.rows[0].n).toBe(0);
  });

  it('a refresh token rejected because a peer already rotated it is not a failure', async () => {
    const a = await createAccount('peer-won');
    // The provider holds our call; meanwhile another writer stores new credentials (bumping the
    // version), then the provider rejects the old refresh token.
    oauth.fail('invalid_grant', 1, (rt) => rt === a.creds.refresh_token);
    const hold = oauth.hold((rt) => rt === a.creds.refresh_token);
    const calls = () => oauth.requests.filter((r) => r.refresh_token === a.creds.refresh_token).length;
    const slow = rt.services.tokenRefresh.refreshNow(a.id, 'admin', a.token_version);
    await vi.waitFor(() => expect(calls()).toBe(1));
    const peer = oauth.issue('peer-won');
    await rt.services.accounts.update(a.id, { credentials: { value: peer, tokenExpiresAt: new Date(Date.now() + 3600_000) } });
    hold.release();
    const out = await slow;
    expect(out).toMatchObject({ result: 'superseded', version: 2 });
    const view = await get(a.id);
    expect(view).toMatchObject({ status: 'active', token_version: 2, status_reason: null, refresh: { consecutive_failures: 0, last_error: null } });
  });

  it('hot path: a valid token without a call; an expired one refreshed once for a burst of callers', async () => {
    const tokens = rt.services.tokens;
    const a = await createAccount('hot');
    const before = oauth.requests.length;
    const t = await tokens.getAccessToken(a.id);
    expect(t.access_token).toBe(a.creds.access_token);
    expect(oauth.requests.length).toBe(before);
    const b = await createAccount('hot-expired', {}, 5); // expires in 5 s: inside any margin, under the 30 s minimum
    const burst = await Promise.all(Array.from({ length: 25 }, () => tokens.getAccessToken(b.id)));
    expect(oauth.requests.length - before).toBe(1);
    expect(new Set(burst.map((x) => x.access_token)).size).toBe(1);
    expect(burst[0]!.access_token).not.toBe(b.creds.access_token);
    expect(burst[0]!.token_version).toBe(2);
    // Over HTTP: the token (no-store), and clear errors for unknown or unusable accounts.
    const res = await post(`/api/v1/accounts/${b.id}/token`);
    expect(res.statusCode).toBe(200);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.json().access_token).toBe(burst[0]!.access_token);
    const missing = await post('/api/v1/accounts/999999/token');
    expect(missing.statusCode).toBe(404);
    // No "status": null in the body: an unknown account has no status to report.
    expect(missing.json().error).toEqual({ code: 'not_found', message: expect.any(String) });
    await post(`/api/v1/accounts/${a.id}/disable`);
    const disabled = await post(`/api/v1/accounts/${a.id}/token`);
    expect(disabled.statusCode).toBe(409);
    expect(disabled.json().error.message).toMatch(new RegExp(`account ${a.id} is disabled`));
    expect(logs.text()).not.toContain(burst[0]!.access_token);
  });

  it('hot path with a dead refresh token: a clear 502, the account expired on the second hit', async () => {
    const a = await createAccount('hot-dead', {}, 5);
    oauth.fail('invalid_grant', 2, (rt) => rt === a.creds.refresh_token);
    const first = await post(`/api/v1/accounts/${a.id}/token`);
    expect(first.statusCode).toBe(502);
    expect(first.json().error).toMatchObject({ code: 'refresh_failed' });
    expect((await get(a.id)).status).toBe('active');
    const res = await post(`/api/v1/accounts/${a.id}/token`);
    expect(res.statusCode).toBe(502);
    expect(res.json().error).toMatchObject({ code: 'refresh_failed', status: 'expired' });
    expect((await get(a.id)).status).toBe('expired');
  });

  it('an upstream 401 cools the account down and refreshes through the guard; a stale report changes nothing', async () => {
    const a = await createAccount('four-oh-one');
    const res = await post(`/api/v1/accounts/${a.id}/unauthorized`, { token_version: 1 });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ stale: false, refresh: 'refreshed', token_version: 2 });
    // Success clears the 401 cooldown (the new token is good); a failing refresh would keep it.
    expect((await get(a.id)).temp_unschedulable_until).toBeNull();
    const stale = await post(`/api/v1/accounts/${a.id}/unauthorized`, { token_version: 1 });
    expect(stale.json()).toMatchObject({ stale: true, cooldown_until: null, refresh: null });
    oauth.fail('500', 1, () => true);
    const failing = (await post(`/api/v1/accounts/${a.id}/unauthorized`, {})).json();
    expect(failing.refresh).toBe('transient');
    expect(Date.parse(failing.cooldown_until) - clock.now()).toBe(600_000);
    expect((await get(a.id)).temp_unschedulable_reason).toBe('oauth_401');
  });

  it('a failing store after a rotation is retried until the new credentials land, and counted', async () => {
    const a = await createAccount('store-fails');
    // The database refuses credential writes for this account until the flag row is gone.
    await sql.query(`CREATE TABLE IF NOT EXISTS fail_writes (account_id bigint PRIMARY KEY)`);
    await sql.query(`CREATE OR REPLACE FUNCTION refuse_writes() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.token_version > OLD.token_version AND EXISTS (SELECT 1 FROM fail_writes WHERE account_id = NEW.id) THEN RAISE EXCEPTION 'disk full (test)'; END IF; RETURN NEW; END $$`);
    await sql.query(`CREATE TRIGGER refuse_writes BEFORE UPDATE ON accounts FOR EACH ROW EXECUTE FUNCTION refuse_writes()`);
    await sql.query(`INSERT INTO fail_writes VALUES ($1)`, [a.id]);
    const failuresBefore = (await rt.metrics.group(AccountMetrics).rotationPersistFailures.get()).values[0]?.value ?? 0;
    try {
      let done = false;
      const p = rt.services.tokenRefresh.refreshNow(a.id, 'admin', a.token_version).finally(() => (done = true));
      // Let it fail a few times (the retry sleeps run on the manual clock), then heal the store.
      for (let i = 0; i < 40 && ((await rt.metrics.group(AccountMetrics).rotationPersistFailures.get()).values[0]?.value ?? 0) < failuresBefore + 3; i++) {
        await clock.advance(1000);
        await pace(20); // the store's failing write answers between two steps of the manual clock
      }
      expect(done).toBe(false);
      await sql.query(`DELETE FROM fail_writes`);
      for (let i = 0; i < 40 && !done; i++) {
        await clock.advance(6000);
        await pace(20); // the retry's write answers between two steps of the manual clock
      }
      expect((await p).result).toBe('refreshed');
      expect((await rt.metrics.group(AccountMetrics).rotationPersistFailures.get()).values[0]!.value).toBeGreaterThanOrEqual(failuresBefore + 3);
      // The rotated token landed: the stored refresh token is the server's live one, and it works.
      expect((await get(a.id)).token_version).toBe(2);
      expect((await rt.services.tokenRefresh.refreshNow(a.id, 'admin', 2)).result).toBe('refreshed');
      expect(oauth.reuses).toBe(0);
      expect(logs.lines.some((l) => l.account_id === a.id && /could not store refreshed credentials/.test(String(l.msg)))).toBe(true);
    } finally {
      await sql.query(`DROP TRIGGER refuse_writes ON accounts`);
    }
  });

  it("refresh calls go through the account's proxy", async () => {
    const proxy = await ConnectProxy.start();
    try {
      const p = (await post('/api/v1/proxies', { name: 'egress', url: proxy.url })).json();
      expect(p.url).not.toContain('proxypass');
      const a = await createAccount('proxied', { proxy_id: p.id });
      expect((await rt.services.tokenRefresh.refreshNow(a.id, 'admin', a.token_version)).result).toBe('refreshed');
      expect(proxy.tunnels).toBeGreaterThan(0);
    } finally {
      await proxy.close();
    }
  });

  it('account_expiry pauses due accounts in one statement and records an outbox event', async () => {
    const past = new Date(Date.now() - 60_000).toISOString();
    const a = await createAccount('exp-due', { expires_at: past, auto_pause_on_expired: true });
    const b = await createAccount('exp-no-autopause', { expires_at: past, auto_pause_on_expired: false });
    const c = await createAccount('exp-future', { expires_at: new Date(Date.now() + 86_400_000).toISOString(), auto_pause_on_expired: true });
    const report = await rt.runNow('account_expiry');
    expect(report.ran).toBe(true);
    expect((await get(a.id)).schedulable).toBe(false);
    expect((await get(a.id)).status).toBe('active');
    expect((await get(b.id)).schedulable).toBe(true);
    expect((await get(c.id)).schedulable).toBe(true);
    const ev = await sql.query(`SELECT payload FROM scheduler_outbox WHERE event_type = 'account_bulk_changed' AND payload->>'reason' = 'account_expired'`);
    expect(ev.rows.map((r) => r.payload.account_ids)).toContainEqual([a.id]);
  });

  it('proxy_expiry: fallback down the backup chain keeping the first origin, direct, loops, automatic and manual restore', async () => {
    const mk = async (name: string, extra: Record<string, unknown> = {}) => (await post('/api/v1/proxies', { name, url: `http://127.0.0.1:9/${name}`, ...extra })).json();
    const past = new Date(Date.now() - 1000).toISOString();
    const c = await mk('C');
    const bProxy = await mk('B', { fallback_mode: 'proxy', backup_proxy_id: c.id });
    const dead = await mk('dead', { expires_at: past });
    const aProxy = await mk('A', { fallback_mode: 'proxy', backup_proxy_id: dead.id });
    await http.inject({ method: 'PATCH', url: `/api/v1/proxies/${dead.id}`, headers: auth, payload: { fallback_mode: 'proxy', backup_proxy_id: bProxy.id } });
    const d = await mk('D', { fallback_mode: 'direct' });
    const loop1 = await mk('L1', { fallback_mode: 'proxy' });
    const loop2 = await mk('L2', { fallback_mode: 'proxy', backup_proxy_id: loop1.id });
    await http.inject({ method: 'PATCH', url: `/api/v1/proxies/${loop1.id}`, headers: auth, payload: { backup_proxy_id: loop2.id } });
    const onA = await createAccount('on-A', { proxy_id: aProxy.id });
    const onD = await createAccount('on-D', { proxy_id: d.id });
    const onL = await createAccount('on-L1', { proxy_id: loop1.id });
    for (const p of [aProxy, d, loop1, loop2]) await http.inject({ method: 'PATCH', url: `/api/v1/proxies/${p.id}`, headers: auth, payload: { expires_at: past } });

    const run = await rt.runNow('proxy_expiry');
    expect(run.ran).toBe(true);
    // A → dead (expired) → B (live): first live proxy down the chain; origin kept.
    expect(await get(onA.id)).toMatchObject({ proxy_id: bProxy.id, proxy_fallback_origin_id: aProxy.id });
    expect(await get(onD.id)).toMatchObject({ proxy_id: null, proxy_fallback_origin_id: d.id });
    // L1 ⇄ L2 both expired: the loop is detected, accounts stay.
    expect(await get(onL.id)).toMatchObject({ proxy_id: loop1.id, proxy_fallback_origin_id: null });
    expect(logs.lines.some((l) => l.proxy_id === loop1.id && /loops back/.test(String(l.reason)))).toBe(true);
    expect((await http.inject({ url: `/api/v1/proxies/${aProxy.id}`, headers: auth })).json()).toMatchObject({ status: 'expired', fallback_accounts: 1 });

    // Second hop: B expires too → C; the origin stays A.
    await http.inject({ method: 'PATCH', url: `/api/v1/proxies/${bProxy.id}`, headers: auth, payload: { expires_at: past } });
    await rt.runNow('proxy_expiry');
    expect(await get(onA.id)).toMatchObject({ proxy_id: c.id, proxy_fallback_origin_id: aProxy.id });

    // Renewing A brings its account home on the next round.
    const future = new Date(Date.now() + 30 * 86_400_000).toISOString();
    await http.inject({ method: 'PATCH', url: `/api/v1/proxies/${aProxy.id}`, headers: auth, payload: { expires_at: future } });
    await rt.runNow('proxy_expiry');
    expect(await get(onA.id)).toMatchObject({ proxy_id: aProxy.id, proxy_fallback_origin_id: null });
    expect((await http.inject({ url: `/api/v1/proxies/${aProxy.id}`, headers: auth })).json().status).toBe('active');

    // Manual restore: refused while expired, works once renewed.
    const refused = await post(`/api/v1/proxies/${d.id}/restore`);
    expect(refused.statusCode).toBe(409);
    expect(refused.json().error.message).toMatch(/expired at .*set a later expires_at/);
    await http.inject({ method: 'PATCH', url: `/api/v1/proxies/${d.id}`, headers: auth, payload: { expires_at: null } });
    const restored = await post(`/api/v1/proxies/${d.id}/restore`);
    expect(restored.json()).toMatchObject({ restored: 1, account_ids: [onD.id] });
    expect(await get(onD.id)).toMatchObject({ proxy_id: d.id, proxy_fallback_origin_id: null });
  });

  it('rejects bad input with the field named and writes nothing', async () => {
    const count = async () => Number((await sql.query(`SELECT count(*) AS n FROM accounts`)).rows[0].n);
    const n0 = await count();
    const cases: Array<[unknown, RegExp]> = [
      [{ platform: 'nope', name: 'x', credentials: { access_token: 'a', refresh_token: 'r' } }, /platform: unknown platform "nope": expected one of .*openai.*configure oauth\.providers\.nope/],
      [{ platform: 'openai', name: 'x', credentials: {} }, /credentials\.access_token/],
      [{ platform: 'openai', name: 'x', credentials: { access_token: 'a' }, proxy_id: 999999 }, /proxy_id: no proxy 999999/],
      [{ platform: 'openai', name: 'x', credentials: { access_token: 'a' }, expires_at: 'tomorrow' }, /expires_at: expected an ISO 8601/],
      [{ platform: 'openai', name: 'x', credentials: { access_token: 'a', password: 'p' } }, /credentials\.password: unknown field/],
      ['not json at all', /./],
    ];
    for (const [payload, pattern] of cases) {
      const res = await http.inject({
        method: 'POST',
        url: '/api/v1/accounts',
        headers: { ...auth, 'content-type': 'application/json' },
        payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
      });
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().error.message).toMatch(pattern);
    }
    // A malformed JWT is accepted with a warning: its expiry is unknown, so no timer.
    const odd = (await post('/api/v1/accounts', { platform: 'openai', name: 'opaque', credentials: { access_token: 'not.a.jwt', refresh_token: 'rt_x' } })).json();
    expect(odd.token_expires_at).toBeNull();
    expect(odd.warnings[0]).toMatch(/not a JWT with an exp claim/);
    // An import with one bad item writes none of them.
    const n1 = await count();
    const imp = await post('/api/v1/accounts/import', {
      accounts: [
        { platform: 'openai', name: 'ok', credentials: { access_token: 'a' } },
        { platform: 'openai', name: '' },
      ],
    });
    expect(imp.statusCode).toBe(400);
    expect(imp.json().error.fields.map((f: { field: string }) => f.field)).toEqual(expect.arrayContaining(['accounts.1.name', 'accounts.1.credentials']));
    expect(await count()).toBe(n1);
    expect(n1).toBe(n0 + 1);
    // Proxies: a loop of one, a URL that is not http(s), hand-set statuses.
    const p = (await post('/api/v1/proxies', { name: 'self', url: 'http://127.0.0.1:9' })).json();
    expect((await http.inject({ method: 'PATCH', url: `/api/v1/proxies/${p.id}`, headers: auth, payload: { backup_proxy_id: p.id } })).json().error.message).toMatch(/own backup/);
    expect((await post('/api/v1/proxies', { name: 'x', url: 'ftp://h' })).json().error.message).toMatch(/url: expected an http/);
    const a = await createAccount('status-by-hand');
    expect((await http.inject({ method: 'PATCH', url: `/api/v1/accounts/${a.id}`, headers: auth, payload: { status: 'banned' } })).json().error.message).toMatch(/status: only active or disabled/);
    expect((await http.inject({ url: '/api/v1/accounts/abc', headers: auth })).statusCode).toBe(404);
  });

  it('never logs a token', async () => {
    const text = logs.text();
    expect(text.length).toBeGreaterThan(0);
    expect(text).not.toMatch(/rt_[0-9a-f]{24}/);
    expect(text).not.toMatch(/eyJ[A-Za-z0-9_-]{10,}\.eyJ/);
  });
});

describe('accounts in embedded mode (PGlite, key in the data directory)', () => {
  it('creates the master key 0600, refreshes through the in-process lock, and reads the credentials back after a restart', async () => {
    const { mkdtempSync, statSync, readFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const { silentLogger } = await import('../src/telemetry/logger.js');
    const dir = embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-acc-')));
    const oauth = await FakeOAuthServer.start({ clientId: 'embedded-client' });
    const env = { RELAY_JOBS_DATA_DIR: dir, RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl, RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'embedded-client' };
    try {
      let rt = await Runtime.create(loadConfig({ env }), { logger: silentLogger() });
      const keyFile = join(dir, 'master-key');
      expect(statSync(keyFile).mode & 0o777).toBe(0o600);
      const creds = oauth.issue('embedded', 3600);
      const a = await rt.services.accounts.create({ platform: 'openai', name: 'embedded', credentials: creds, tokenExpiresAt: new Date(Date.now() + 3600_000) });
      expect((await rt.services.tokenRefresh.refreshNow(a.id, 'admin', a.token_version)).result).toBe('refreshed');
      const token = (await rt.services.tokens.getAccessToken(a.id)).access_token;
      await rt.shutdown();
      const key = readFileSync(keyFile, 'utf8');
      rt = await Runtime.create(loadConfig({ env }), { logger: silentLogger() });
      expect((await rt.services.tokens.getAccessToken(a.id)).access_token).toBe(token);
      expect(readFileSync(keyFile, 'utf8')).toBe(key);
      await rt.shutdown();
      // Another key for the same data: refused at start, not garbage later.
      const other = Buffer.alloc(32, 9).toString('base64');
      await expect(Runtime.create(loadConfig({ env: { ...env, RELAY_JOBS_MASTER_KEY: other } }), { logger: silentLogger() })).rejects.toThrow(
        /does not match the key this database was encrypted with/,
      );
    } finally {
      await oauth.close();
    }
  });
});

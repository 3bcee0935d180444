import { pace } from './helpers/wait.js';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import type pg from 'pg';
import type { Runtime } from '../src/app/runtime.js';
import type { ManualClock } from '../src/time/clock.js';
import { RefreshLeases } from '../src/areas/accounts/store/refresh-lease.js';
import type { FakeOAuthServer } from './fixtures/oauth-server.js';
import { ConnectProxy } from './fixtures/connect-proxy.js';
import { accountsRuntime, expectNoTokenLogged, type AccountsRuntime } from './helpers/accounts-runtime.js';
import { AccountMetrics } from '../src/areas/accounts/metrics.js';

/**
 * What one token refresh does, on real PostgreSQL and Redis against a real OAuth server on loopback
 * (test/helpers/accounts-runtime.ts, manual clock): the rotation and its bookkeeping in three
 * statements, how provider replies are classified, the account lease against a second holder, a
 * peer's rotation, a store failing after a rotation, the account's proxy, and no token in the logs.
 * When refreshes run is in accounts-refresh-schedule.test.ts.
 */
describe('one token refresh (real PostgreSQL, Redis, OAuth server)', () => {
  const { started, createAccount, get, post } = accountsRuntime();
  let sql: pg.Client;
  let oauth: FakeOAuthServer;
  let rt: Runtime;
  let clock: ManualClock;
  let logs: AccountsRuntime['logs'];
  let prefix: string;
  beforeAll(() => {
    ({ sql, oauth, rt, clock, logs, prefix } = started());
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
    await vi.waitFor(() => expect(calls()).toBe(1), { timeout: 10_000 }); // vi.waitFor's default is 1 s
    const peer = oauth.issue('peer-won');
    await rt.services.accounts.update(a.id, { credentials: { value: peer, tokenExpiresAt: new Date(Date.now() + 3600_000) } });
    hold.release();
    const out = await slow;
    expect(out).toMatchObject({ result: 'superseded', version: 2 });
    const view = await get(a.id);
    expect(view).toMatchObject({ status: 'active', token_version: 2, status_reason: null, refresh: { consecutive_failures: 0, last_error: null } });
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

  it('never logs a token', () => expectNoTokenLogged(logs.text()));
});

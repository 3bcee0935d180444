import { beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import type { ManualClock } from '../src/time/clock.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { accountsRuntime, expectNoTokenLogged, auth, type AccountsRuntime } from './helpers/accounts-runtime.js';
import { embeddedDataDir } from './helpers/pglite-template.js';

/**
 * Accounts and proxies over the HTTP API, on real PostgreSQL and Redis against a real OAuth server
 * on loopback (test/helpers/accounts-runtime.ts, manual clock): creation that never shows a token,
 * the token hot path and upstream 401 reports, the account_expiry and proxy_expiry jobs, and input
 * checks; then, in embedded mode (PGlite), the master key kept in the data directory. How one
 * refresh goes is in accounts-refresh.test.ts, when refreshes run in accounts-refresh-schedule.test.ts.
 */
describe('accounts and proxies over the API (real PostgreSQL, Redis, OAuth server)', () => {
  const { started, createAccount, get, post } = accountsRuntime();
  let sql: pg.Client;
  let oauth: FakeOAuthServer;
  let rt: Runtime;
  let http: FastifyInstance;
  let clock: ManualClock;
  let logs: AccountsRuntime['logs'];
  beforeAll(async () => {
    ({ sql, oauth, rt, http, clock, logs } = started());
  });

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

  it('account_expiry pauses due accounts in one statement and records an outbox event', async () => {
    const past = new Date(clock.now() - 60_000).toISOString();
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
    const past = new Date(clock.now() - 1000).toISOString();
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

  it('never logs a token', () => expectNoTokenLogged(logs.text()));
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

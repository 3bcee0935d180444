import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { waitFor } from './helpers/wait.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { FakeAnthropic } from './fixtures/providers/anthropic.js';
import { FakeGoogle } from './fixtures/providers/gemini.js';
import { ChatUpstream } from './fixtures/chat-upstream.js';
import { ConnectProxy } from './fixtures/connect-proxy.js';

/**
 * Issue 47 from outside: two real replicas against strict fakes of the three providers
 * (test/fixtures: each refuses what the real one refuses, answers in its shapes). Refresh on every
 * platform (Google's without rotation), dead tokens presented at most twice and never again, a
 * configuration fault that blames no account, account tests on all three, a 429 with its reset,
 * and API-key monitors of all three providers with the challenge. The built-in client ids and
 * secrets are used as shipped: only hosts are pointed at the fakes.
 */
describe('provider conformance across two real replicas', () => {
  let cluster: Cluster;
  let sql: pg.Client;
  let openai: FakeOAuthServer;
  let anthropic: FakeAnthropic;
  let oldHost: FakeAnthropic;
  let google: FakeGoogle;
  let chat: ChatUpstream;
  /** A relay that echoes what it was sent in a 401, its headers and body: what it saw must come back masked. */
  let echo: Server;
  const echoUrl = () => `http://127.0.0.1:${(echo.address() as AddressInfo).port}`;

  beforeAll(async () => {
    openai = await FakeOAuthServer.start({ clientId: 'app_EMoamEEZ73f0CkXaXp7hrann' });
    anthropic = await FakeAnthropic.start();
    oldHost = await FakeAnthropic.start({ oldHost: true });
    google = await FakeGoogle.start();
    chat = await ChatUpstream.start();
    echo = createServer((req, res) => {
      const said = String(req.headers.authorization ?? '');
      res.writeHead(401, { 'content-type': 'application/json', 'x-echo-auth': said });
      res.end(JSON.stringify({ type: 'error', error: { type: 'authentication_error', message: `you sent ${said}` } }));
    });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    cluster = await startCluster({
      replicas: ['pc0', 'pc1'],
      env: {
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: openai.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__API_URL: openai.apiUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__ANTHROPIC__TOKEN_URL: anthropic.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__ANTHROPIC__API_URL: anthropic.apiUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__GEMINI__TOKEN_URL: google.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__GEMINI__API_URL: google.apiUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__GEMINI__GENERATIVE_URL: google.generativeUrl,
        // A hand-configured platform that speaks Claude, still pointed at the host that answers 404 since mid-2026.
        RELAY_JOBS__OAUTH__PROVIDERS__CLAUDE_OLD__LIKE: 'anthropic',
        RELAY_JOBS__OAUTH__PROVIDERS__CLAUDE_OLD__TOKEN_URL: `${oldHost.url}/v1/oauth/token`,
        RELAY_JOBS__OAUTH__PROVIDERS__CLAUDE_OLD__CLIENT_ID: '9d1c250a-e61b-44d9-88ed-5944d1962f5e',
        // A platform speaking Claude whose API host is a relay that echoes credentials.
        RELAY_JOBS__OAUTH__PROVIDERS__ECHO__LIKE: 'anthropic',
        RELAY_JOBS__OAUTH__PROVIDERS__ECHO__TOKEN_URL: anthropic.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__ECHO__CLIENT_ID: '9d1c250a-e61b-44d9-88ed-5944d1962f5e',
        RELAY_JOBS__OAUTH__PROVIDERS__ECHO__API_URL: echoUrl(),
        RELAY_JOBS__CHANNEL_MONITOR__MIN_INTERVAL: '1s',
        RELAY_JOBS__CHANNEL_MONITOR__POLL_INTERVAL: '200ms',
      },
    });
    sql = await cluster.sql();
  });
  afterAll(async () => {
    await cluster?.stop();
    await Promise.all([openai, anthropic, oldHost, google, chat].map((f) => f?.close()));
    await new Promise((r) => echo?.close(r));
  });

  const api = async (i: number, path: string, body?: unknown, method?: string) => {
    const res = await cluster.api(i, path, { body, method });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null, text };
  };
  const create = async (platform: string, name: string, credentials: Record<string, unknown>, metadata?: Record<string, string>) => {
    const r = await api(0, '/accounts', { platform, name, credentials, ...(metadata ? { metadata } : {}) });
    expect(r.status, r.text).toBe(201);
    return r.body.id as number;
  };
  const refresh = (i: number, id: number) => api(i, `/accounts/${id}/refresh`, {});

  it('refreshes on all three platforms as their token endpoints demand; Google keeps the refresh token', async () => {
    const o = openai.issue('conf-openai', 3600);
    const a = anthropic.issue('conf-claude');
    const g = google.issue('conf-gemini');
    const ids = { openai: await create('openai', 'o', o), anthropic: await create('anthropic', 'a', a), gemini: await create('gemini', 'g', g) };
    for (const [platform, id] of Object.entries(ids)) {
      const r = await refresh(platform === 'gemini' ? 1 : 0, id);
      expect(r.body, `${platform}: ${r.text}`).toMatchObject({ result: 'refreshed', account: { status: 'active' } });
    }
    // Rotation: the Claude refresh token presented once and replaced; Google's stays the one presented, and works again.
    expect(anthropic.presentedCount(a.refresh_token)).toBe(1);
    expect(anthropic.liveTokenOf('conf-claude')).not.toBe(a.refresh_token);
    expect((await refresh(0, ids.gemini)).body).toMatchObject({ result: 'refreshed' });
    expect(google.presentedCount(g.refresh_token)).toBe(2);
    // The ChatGPT account id from the id token is kept as metadata (the Codex test needs it).
    expect((await api(1, `/accounts/${ids.openai}`)).body.metadata).toMatchObject({ chatgpt_account_id: openai.accountIdOf('conf-openai') });
    // The strict fakes accepted each request: JSON to Anthropic, a form with the CLI's secret to Google.
    expect(anthropic.requests.filter((r) => r.path === '/v1/oauth/token').every((r) => r.headers['content-type'] === 'application/json')).toBe(true);
    expect(google.refusals).toBe(0);
  });

  it('a dead refresh token is presented at most twice, the account ends expired with the words, and no replica sends it again', async () => {
    const a = anthropic.issue('conf-dead');
    anthropic.revoke(a.refresh_token);
    const id = await create('anthropic', 'dead', a);
    expect((await refresh(0, id)).body).toMatchObject({ result: 'transient', reason: 'invalid_grant' });
    const second = await refresh(1, id);
    expect(second.body).toMatchObject({ result: 'permanent', account: { status: 'expired' } });
    expect(second.body.account.status_reason).toMatch(/Refresh token not found or invalid/);
    expect((await refresh(0, id)).body).toMatchObject({ result: 'permanent', reason: 'dead_refresh_token' });
    // The same dead token imported again, as another account: expired at once, never sent.
    const copy = await create('anthropic', 'dead-copy', a);
    expect((await refresh(1, copy)).body).toMatchObject({ result: 'permanent', reason: 'dead_refresh_token', account: { status: 'expired' } });
    expect(anthropic.presentedCount(a.refresh_token)).toBe(2);

    // OpenAI: a bare 401 is a dead token too (the Codex CLI reads every 401 so).
    const o = openai.issue('conf-bare401', 3600);
    const oid = await create('openai', 'bare401', o);
    openai.fail('bare_401', 2, (rt) => rt === o.refresh_token);
    await refresh(0, oid);
    expect((await refresh(1, oid)).body).toMatchObject({ result: 'permanent', account: { status: 'expired' } });
    expect(openai.presentedCount(o.refresh_token)).toBe(2);
  });

  it('a configuration fault blames no account: its own outcome, a doctor check, slow retries', async () => {
    const a = anthropic.issue('conf-oldhost');
    const id = await create('claude_old', 'old-host', a);
    const r = await refresh(0, id);
    expect(r.body).toMatchObject({ result: 'config', reason: 'not_found_error', account: { status: 'active' } });
    expect(r.body.account.refresh.last_error).toBe('config:not_found_error');
    const doctor = await api(1, '/doctor');
    const check = (doctor.body.checks as Array<{ name: string; status: string; measured: string }>).find((c) => c.name === 'oauth_config');
    expect(check).toMatchObject({ status: 'fail' });
    expect(check!.measured).toMatch(/claude_old: 1 account\(s\) last refused as not_found_error/);
    const metrics = await (await fetch(cluster.replica(0).url('/metrics'))).text();
    expect(metrics).toMatch(/relay_jobs_token_refresh_total\{[^}]*platform="claude_old"[^}]*result="config"[^}]*\} 1/);
  });

  it('account tests pass on all three platforms, through each provider endpoint the gateways use', async () => {
    const o = openai.issue('conf-test-openai', 3600);
    const withProject = google.issue('conf-test-g1', { projectId: 'proj-77' });
    const noProject = google.issue('conf-test-g2');
    const cases = [
      { id: await create('openai', 't-openai', o), path: '/backend-api/codex/responses' },
      { id: await create('anthropic', 't-claude', anthropic.issue('conf-test-claude')), path: '/v1/messages?beta=true' },
      { id: await create('gemini', 't-gemini-project', withProject, { project_id: 'proj-77' }), path: '/v1internal:streamGenerateContent?alt=sse' },
      { id: await create('gemini', 't-gemini', noProject), path: '/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse' },
    ];
    for (const c of cases) {
      const r = await api(1, `/accounts/${c.id}/test`, {});
      expect(r.status, r.text).toBe(200);
      expect(r.body, r.text).toMatchObject({ ok: true, status: 200, error_class: null });
      expect(new URL(r.body.request.url).pathname + new URL(r.body.request.url).search).toBe(c.path);
      expect(r.body.request.headers.authorization).toBe('Bearer ***');
      expect(r.text).not.toContain(o.access_token);
    }
  });

  it('a 429 makes the account unschedulable until the reset the reply gave and clears error; a pass recovers it', async () => {
    const a = anthropic.issue('conf-429');
    const id = await create('anthropic', 'rl', a);
    await sql.query(`UPDATE accounts SET status = 'error', status_reason = 'earlier 401' WHERE id = $1`, [id]);
    const resetAt = Math.floor(Date.now() / 1000) + 1800;
    anthropic.setBehaviour(a.access_token, { mode: 'rate_limited', resetAt });
    const r = await api(0, `/accounts/${id}/test`, {});
    expect(r.body).toMatchObject({ ok: false, status: 429, error_class: 'rate_limited', effect: { status_before: 'error', status_after: 'active' } });
    const acct = (await api(1, `/accounts/${id}`)).body;
    expect(Date.parse(acct.temp_unschedulable_until)).toBe(resetAt * 1000);
    expect(acct.temp_unschedulable_reason).toMatch(/^rate_limited: /);
    anthropic.setBehaviour(a.access_token, { mode: 'unauthorized' });
    expect((await api(0, `/accounts/${id}/test`, {})).body).toMatchObject({ error_class: 'auth', effect: { status_after: 'error' } });
    anthropic.setBehaviour(a.access_token, { mode: 'ok' });
    expect((await api(1, `/accounts/${id}/test`, {})).body).toMatchObject({ ok: true, effect: { status_after: 'active', temp_unschedulable_until: null, recovered: true } });
    // A 529 (overloaded): unschedulable for 10 minutes (asked on a cleared account: a longer hold already set would be kept).
    anthropic.setBehaviour(a.access_token, { mode: 'overloaded' });
    const asked = Date.now();
    const overloaded = await api(0, `/accounts/${id}/test`, {});
    const answered = Date.now();
    expect(overloaded.body).toMatchObject({ status: 529, error_class: 'overloaded', effect: { temp_unschedulable_reason: expect.stringMatching(/^overloaded: /) } });
    const held = Date.parse((await api(1, `/accounts/${id}`)).body.temp_unschedulable_until);
    expect(held).toBe(Date.parse(overloaded.body.effect.temp_unschedulable_until));
    expect(held).toBeGreaterThanOrEqual(asked + 10 * 60_000 - 1000);
    expect(held).toBeLessThanOrEqual(answered + 10 * 60_000 + 1000);

    // A reset far in the future is capped at a day; one in the past is no reset (the 5-minute default).
    anthropic.setBehaviour(a.access_token, { mode: 'rate_limited', resetAt: 1e12 });
    const far = await api(0, `/accounts/${id}/test`, {});
    expect(far.status, far.text).toBe(200);
    expect(Date.parse(far.body.effect.temp_unschedulable_until)).toBeLessThanOrEqual(Date.now() + 86_400_000);
    anthropic.setBehaviour(a.access_token, { mode: 'ok' });
    await api(0, `/accounts/${id}/test`, {});
    anthropic.setBehaviour(a.access_token, { mode: 'rate_limited', resetAt: 5 });
    const past = (await api(0, `/accounts/${id}/test`, {})).body;
    const until = Date.parse(past.effect.temp_unschedulable_until);
    expect(until).toBeGreaterThan(Date.now() + 4 * 60_000);
    expect(until).toBeLessThanOrEqual(Date.now() + 5 * 60_000);
  });

  it("an account test goes through the account's proxy, as its refresh does", async () => {
    const proxy = await ConnectProxy.start();
    try {
      const p = await api(0, '/proxies', { name: 'conf-egress', url: proxy.url });
      expect(p.status, p.text).toBe(201);
      const a = anthropic.issue('conf-proxied');
      const made = await api(0, '/accounts', { platform: 'anthropic', name: 'proxied', credentials: a, proxy_id: p.body.id });
      expect(made.status, made.text).toBe(201);
      expect(proxy.tunnels).toBe(0);
      const r = await api(1, `/accounts/${made.body.id}/test`, {});
      expect(r.body, r.text).toMatchObject({ ok: true, status: 200, request: { via_proxy: true } });
      // The tunnel was the test's: the token was fresh, so no refresh went out before it.
      expect(proxy.tunnels).toBeGreaterThan(0);
      expect(anthropic.presentedCount(a.refresh_token)).toBe(0);
      expect(r.text).not.toContain('proxypass');
    } finally {
      await proxy.close();
    }
  });

  it('a relay that echoes the credential gets it back masked: in the answer, its headers, the account and its audit', async () => {
    const a = anthropic.issue('conf-echo');
    const id = await create('echo', 'echo', a);
    const r = await api(0, `/accounts/${id}/test`, {});
    expect(r.body).toMatchObject({ ok: false, status: 401, error_class: 'auth' });
    expect(r.body.response.headers['x-echo-auth']).toBe('Bearer ***');
    expect(r.body.detail).toMatch(/you sent Bearer \*\*\*/);
    expect(r.text).not.toContain(a.access_token);
    const stored = await sql.query(`SELECT a.status_reason, (SELECT string_agg(detail::text, ' ') FROM account_audit WHERE account_id = a.id) AS audit FROM accounts a WHERE a.id = $1`, [id]);
    expect(stored.rows[0].status_reason).toMatch(/you sent Bearer \*\*\*/);
    expect(JSON.stringify(stored.rows[0])).not.toContain(a.access_token);
  });

  it("a monitor never sends a disabled account's token", async () => {
    const a = anthropic.issue('conf-disabled');
    const id = await create('anthropic', 'disabled', a);
    expect((await api(0, `/accounts/${id}/disable`, {})).status).toBe(200);
    const m = await api(1, '/monitors', { name: 'conf-disabled', model: 'claude-haiku-4-5', account_id: id, interval: '1s' });
    expect(m.status, m.text).toBe(201);
    await waitFor(async () => (await api(0, `/monitors/${m.body.id}`)).body.last_probe.error_class === 'auth', { what: "the disabled account's monitor recorded as auth" });
    expect(anthropic.requests.filter((r) => r.headers.authorization === `Bearer ${a.access_token}`)).toEqual([]);
    await api(0, `/monitors/${m.body.id}`, undefined, 'DELETE');
  });

  it('API-key monitors speak each provider, check the challenge, and fail a relay that answers wrongly', async () => {
    chat.addApiKey('sk-openai-monitor');
    anthropic.addApiKey('sk-ant-api-monitor');
    google.addApiKey('AIza-monitor');
    const made = [
      { provider: 'openai', base_url: chat.url, api_key: 'sk-openai-monitor', model: 'gpt-4o-mini' },
      { provider: 'anthropic', base_url: anthropic.url, api_key: 'sk-ant-api-monitor', model: 'claude-haiku-4-5' },
      { provider: 'gemini', base_url: google.url, api_key: 'AIza-monitor', model: 'gemini-2.5-flash' },
    ];
    const ids: number[] = [];
    for (const m of made) {
      const r = await api(0, '/monitors', { name: `conf-${m.provider}`, interval: '1s', challenge: true, ...m });
      expect(r.status, r.text).toBe(201);
      expect(r.body).toMatchObject({ provider: m.provider, challenge: true });
      ids.push(r.body.id);
    }
    const last = async (id: number) => (await api(1, `/monitors/${id}`)).body.last_probe as { status: number | null; error_class: string | null };
    for (const id of ids) await waitFor(async () => (await last(id)).status === 200 && (await last(id)).error_class === null, { what: `monitor ${id} passing with its challenge` });
    anthropic.setBehaviour('sk-ant-api-monitor', { mode: 'wrong_answer' });
    await waitFor(async () => (await last(ids[1]!)).error_class === 'wrong_answer', { what: 'a wrong answer caught by the challenge' });
    // Bad input names the field.
    const bad = await api(0, '/monitors', { name: 'x', interval: '1s', model: 'm', base_url: chat.url, api_key: 'k', provider: 'cohere' });
    expect(bad.status).toBe(400);
    expect(bad.text).toMatch(/provider.*expected one of openai, anthropic, gemini/);
    for (const id of ids) await api(0, `/monitors/${id}`, undefined, 'DELETE');
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { ProbeClient } from '../src/upstream/probe-client.js';
import { chatTarget } from './helpers/probe-target.js';
import { MonitorRunner } from '../src/areas/probes/monitor-runner.js';
import type { ClaimedMonitor, Monitors } from '../src/areas/probes/store/monitors.js';
import type { AccountTester } from '../src/areas/accounts/index.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { ManualClock, systemClock, type Clock } from '../src/time/clock.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { ChatUpstream } from './fixtures/chat-upstream.js';
import { captureLogs } from './helpers/log-capture.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freePort, freshDatabase, uniqueName } from './helpers/services.js';
import { holdFor, quietFor, waitFor } from './helpers/wait.js';
import { Deadline } from '../src/time/deadline.js';

const ADMIN = 'probes-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
/**
 * Channel monitors and scheduled account tests on real PostgreSQL, against a real chat-completions
 * upstream on loopback. Time is real (probes are real HTTP), so every wait polls for its condition.
 */
describe('fleet probes (real PostgreSQL, loopback upstream)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let up: ChatUpstream;
  let rt: Runtime;
  let http: FastifyInstance;
  let codex: FakeOAuthServer;
  /** The Codex test requests the fake saw with this access token. */
  const codexHits = (token: string) => codex.requests.filter((r) => r.path === '/backend-api/codex/responses' && r.headers.authorization === `Bearer ${token}`);
  let logs: ReturnType<typeof captureLogs>;
  const prefix = uniqueName('rjprobe');

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    up = await ChatUpstream.start();
    // The keys given to monitors without a behaviour of their own (the fake refuses any key it was not told of).
    up.addApiKey('m-fast', 'm-missed', 'order-1', 'order-2');
    codex = await FakeOAuthServer.start();
    logs = captureLogs('probe-1');
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'probe-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__CHANNEL_MONITOR__MIN_INTERVAL: '1s',
        RELAY_JOBS__CHANNEL_MONITOR__POLL_INTERVAL: '100ms',
        RELAY_JOBS__CHANNEL_MONITOR__LEASE_GRACE: '1s',
        // Accounts here are ChatGPT (openai) accounts: their monitors and tests speak the Codex endpoint of the strict fake.
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__API_URL: codex.apiUrl,
        RELAY_JOBS__SCHEDULED_ACCOUNT_TEST__POLL_INTERVAL: '200ms',
        RELAY_JOBS__SCHEDULED_ACCOUNT_TEST__TIMEOUT: '2s',
      },
    });
    rt = await Runtime.create(config, { logger: logs.logger });
    http = buildHttpServer(rt);
  });
  afterAll(async () => {
    await rt.services.monitorRunner.stop(Deadline.within(systemClock, 2000));
    await rt.services.accountTestRunner.stop(Deadline.within(systemClock, 2000));
    await rt.shutdown();
    await http.close();
    await up.close();
    await codex.close();
    await sql.end();
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  const post = (url: string, payload: unknown) => http.inject({ method: 'POST', url, headers: auth, payload: payload as object });
  const patch = (url: string, payload: unknown) => http.inject({ method: 'PATCH', url, headers: auth, payload: payload as object });
  const monitor = (key: string, extra: Record<string, unknown> = {}) => ({ name: key, base_url: up.url, model: 'gpt-probe', api_key: key, interval: '1s', timeout: '800ms', ...extra });
  const fields = (res: { json: () => { error: { fields: Array<{ field: string }> } } }) => res.json().error.fields.map((f) => f.field);

  it('refuses bad monitors and plans with 400 naming the field', async () => {
    const acct = await rt.services.accounts.create({ platform: 'openai', name: 'bad-input', credentials: { access_token: 'tok-bad' }, tokenExpiresAt: null });
    const cases: Array<[string, unknown, string]> = [
      ['/api/v1/monitors', monitor('k', { base_url: 'not a url' }), 'base_url'],
      ['/api/v1/monitors', monitor('k', { base_url: 'ftp://example.com' }), 'base_url'],
      ['/api/v1/monitors', monitor('k', { interval: '500ms' }), 'interval'],
      ['/api/v1/monitors', monitor('k', { interval: 'often' }), 'interval'],
      ['/api/v1/monitors', { name: 'a', model: 'm', interval: '1s', account_id: 999_999 }, 'account_id'],
      ['/api/v1/monitors', { name: 'a', model: 'm', interval: '1s', base_url: up.url }, 'api_key'],
      ['/api/v1/monitors', monitor('k', { jitter: '5s' }), 'jitter'],
      ['/api/v1/monitors', monitor('k', { colour: 'red' }), 'colour'],
      ['/api/v1/account-tests', { account_id: acct.id, cron: '0 0 30 2 *', model: 'm' }, 'cron'],
      ['/api/v1/account-tests', { account_id: acct.id, cron: 'whenever', model: 'm' }, 'cron'],
      ['/api/v1/account-tests', { account_id: acct.id, cron: '* * * * *', timezone: 'Mars/Olympus', model: 'm' }, 'timezone'],
      ['/api/v1/account-tests', { account_id: 999_999, cron: '* * * * *', model: 'm' }, 'account_id'],
    ];
    for (const [url, body, field] of cases) {
      const res = await post(url, body);
      expect(res.statusCode, `${JSON.stringify(body)} → ${res.body}`).toBe(400);
      expect(fields(res)).toContain(field);
    }
    expect(await sql.query(`SELECT count(*)::int AS n FROM monitors`).then((r) => r.rows[0].n)).toBe(0);
  });

  it('keeps the api key write-only: sealed at rest, never in a response or a log', async () => {
    const secret = 'sk-secret-write-only-0123456789';
    const res = await post('/api/v1/monitors', monitor(secret, { name: 'write-only', enabled: false }));
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json()).toMatchObject({ has_api_key: true, enabled: false, interval_ms: 1000 });
    const id = res.json().id;
    for (const body of [res.body, (await http.inject({ url: `/api/v1/monitors/${id}`, headers: auth })).body, (await http.inject({ url: '/api/v1/monitors', headers: auth })).body])
      expect(body).not.toContain(secret);
    const row = (await sql.query(`SELECT api_key_sealed FROM monitors WHERE id = $1`, [id])).rows[0];
    expect(row.api_key_sealed).toMatch(/^v1:/);
    expect(logs.text()).not.toContain(secret);
    // Deleting a monitor takes its history with it: raw results and minute rollups.
    await sql.query(`INSERT INTO monitor_rollups (monitor_id, minute, probes, ok) VALUES ($1, date_trunc('minute', now()), 2, 1)`, [id]);
    expect((await http.inject({ method: 'DELETE', url: `/api/v1/monitors/${id}`, headers: auth })).statusCode).toBe(204);
    expect((await sql.query(`SELECT count(*)::int AS n FROM monitor_rollups WHERE monitor_id = $1`, [id])).rows[0].n).toBe(0);
  });

  it('classifies garbage, hangs, resets, 401, 429 and 5xx without crashing', async () => {
    const client = new ProbeClient();
    const cases: Array<[string, Parameters<ChatUpstream['set']>[1], string | null]> = [
      ['c-ok', { mode: 'ok' }, null],
      ['c-garbage', { mode: 'garbage' }, 'bad_body'],
      ['c-hang', { mode: 'hang' }, 'timeout'],
      ['c-reset', { mode: 'reset' }, 'connect'],
      ['c-401', { mode: 401 }, 'auth'],
      ['c-403', { mode: 403 }, 'auth'],
      ['c-429', { mode: 429 }, 'rate_limited'],
      ['c-503', { mode: 503 }, '5xx'],
      ['c-400', { mode: 400 }, 'http_4xx'],
    ];
    for (const [key, b, cls] of cases) {
      up.set(key, b);
      const r = await client.probe(chatTarget({ baseUrl: up.url, apiKey: key, model: 'm', timeoutMs: 500 }));
      expect(r.errorClass, key).toBe(cls);
      expect(r.ok).toBe(cls === null);
      if (cls === null) expect(r.ttfbMs).not.toBeNull();
    }
    // A key api.openai.com does not know: its 401 invalid_api_key is an auth failure, quoting the key only redacted.
    const unknown = 'sk-never-registered-0123456789';
    const denied = await client.probe(chatTarget({ baseUrl: up.url, apiKey: unknown, model: 'm', timeoutMs: 500 }));
    expect(denied).toMatchObject({ ok: false, status: 401, errorClass: 'auth' });
    expect(denied.detail).toMatch(/^HTTP 401 invalid_api_key: Incorrect API key provided: sk-never\*{18}6789\./);
    expect(denied.detail).not.toContain(unknown);
    const closed = await freePort();
    const refused = await client.probe(chatTarget({ baseUrl: `http://127.0.0.1:${closed}`, apiKey: 'x', model: 'm', timeoutMs: 500 }));
    expect(refused.errorClass).toBe('connect');
    await client.close();
  });

  // The monitor runner's tests (one after another) and the account-test runner's test run side by
  // side: they share no monitor, plan, account or upstream key. The silence after the edits counts
  // every probe but the plan's; the overlap count still covers every key, the plan's included.
  describe.concurrent('monitor runner', () => {
    it.sequential('probes each monitor once per interval, never overlapping itself, and records status, latency and class', async ({ expect }) => {
      up.set('m-slow', { latencyMs: 300 });
      up.set('m-500', { mode: 500 });
      up.set('m-hang', { mode: 'hang' });
      up.set('m-long', { mode: 'hang' });
      const ids: Record<string, number> = {};
      for (const key of ['m-fast', 'm-slow', 'm-500', 'm-hang', 'm-long']) {
        // m-long hangs longer than its interval: its lease must hold the next claim back.
        const res = await post('/api/v1/monitors', monitor(key, key === 'm-long' ? { timeout: '2500ms' } : {}));
        expect(res.statusCode, res.body).toBe(201);
        ids[key] = res.json().id;
      }
      const started = Date.now();
      rt.services.monitorRunner.start();
      await waitFor(() => up.count('m-fast') >= 6, { what: 'six probes of the fast monitor' });
      await waitFor(() => up.count('m-hang') >= 4, { what: 'four probes of the hanging monitor' });
      const elapsed = Date.now() - started;
      expect(up.count('m-long')).toBeLessThanOrEqual(Math.ceil(elapsed / 2500) + 1);
      for (const key of ['m-fast', 'm-slow', 'm-500', 'm-hang']) {
        // At most one probe per 1 s slot since the monitor became due (+1 for the slot in progress).
        expect(up.count(key), key).toBeLessThanOrEqual(Math.ceil(elapsed / 1000) + 2);
        const slots = up.hits.get(key)!.map((h) => h.slot);
        expect(new Set(slots).size, `${key}: a slot probed twice`).toBe(slots.length);
      }
      expect(up.overlaps).toBe(0);
      await waitFor(async () => (await sql.query(`SELECT count(DISTINCT monitor_id)::int AS n FROM monitor_results`)).rows[0].n === 5, { what: 'results stored' });
      const last = async (key: string) => (await http.inject({ url: `/api/v1/monitors/${ids[key]}`, headers: auth })).json().last_probe;
      await waitFor(async () => (await last('m-hang')).error_class === 'timeout' && (await last('m-500')).error_class === '5xx', { what: 'last probes' });
      expect(await last('m-fast')).toMatchObject({ status: 200, error_class: null });
      const slow = (await sql.query(`SELECT min(latency_ms)::int AS lat, min(ttfb_ms)::int AS ttfb FROM monitor_results WHERE monitor_id = $1`, [ids['m-slow']])).rows[0];
      expect(slow.lat).toBeGreaterThanOrEqual(300);
      expect(slow.ttfb).toBeGreaterThanOrEqual(300);
      expect((await sql.query(`SELECT count(*)::int AS n FROM monitor_results WHERE fenced_out`)).rows[0].n).toBe(0);
    });

    it.sequential("a new monitor's next probe waits half an interval after the creation probe ended, however slow it was (issue 49)", async ({ expect }) => {
      up.set('m-slow-first', { latencyMs: 800 });
      const res = await post('/api/v1/monitors', monitor('m-slow-first', { interval: '2s', timeout: '1500ms' }));
      expect(res.statusCode, res.body).toBe(201);
      await waitFor(() => up.hits.get('m-slow-first')?.[0]?.end, { what: 'the creation probe answered' });
      up.set('m-slow-first', { latencyMs: 0 });
      await waitFor(() => (up.hits.get('m-slow-first')?.length ?? 0) >= 2, { what: 'the next probe' });
      const [first, second] = up.hits.get('m-slow-first')!;
      // Half of 2 s after the first probe ended (the upstream's own clock; 50 ms for the database's).
      expect(second!.start - first!.end!).toBeGreaterThanOrEqual(1000 - 50);
      await patch(`/api/v1/monitors/${res.json().id}`, { enabled: false });
    });

    it.sequential('takes edits and deletes at the next claim', async ({ expect }) => {
      const ids = (await sql.query(`SELECT id, name FROM monitors WHERE name LIKE 'm-%'`)).rows as Array<{ id: number; name: string }>;
      const fast = ids.find((r) => r.name === 'm-fast')!.id;
      expect((await patch(`/api/v1/monitors/${fast}`, { enabled: false })).statusCode).toBe(200);
      for (const r of ids) if (r.name !== 'm-fast') expect((await http.inject({ method: 'DELETE', url: `/api/v1/monitors/${r.id}`, headers: auth })).statusCode).toBe(204);
      // Anything already claimed finishes (at most the hanging one's 800 ms); after that, silence.
      // Every probe counts but the plan's, whose test runs beside this one.
      const probes = () => up.total - up.count('acct-test-token');
      await holdFor(
        1500,
        'the margin for a probe claimed just before the edits to reach the upstream: not observable from here (waiting for the runner to go idle takes as long: a hanging monitor is in flight most of the time)',
      );
      const before = probes();
      await quietFor(2500, "2.5 intervals of these 1 s monitors, and past m-long's 3.5 s lease counted from before the margin: a probe of an edited monitor would land within them");
      expect(probes()).toBe(before);
      // Re-enabled with another model: probed again, with the new model.
      expect((await patch(`/api/v1/monitors/${fast}`, { enabled: true, model: 'gpt-other' })).statusCode).toBe(200);
      await waitFor(() => up.hits.get('m-fast')!.at(-1)!.model === 'gpt-other', { what: 'probe with the new model' });
      await patch(`/api/v1/monitors/${fast}`, { enabled: false });
    });

    it.sequential("probes through an upstream account: its access token, in its platform's account test", async ({ expect }) => {
      const creds = codex.issue('probe-acct', 3600);
      const acct = await rt.services.accounts.create({ platform: 'openai', name: 'probe-acct', credentials: creds, tokenExpiresAt: null });
      const res = await post('/api/v1/monitors', { name: 'via-account', model: 'gpt-probe', account_id: acct.id, interval: '1s' });
      expect(res.statusCode, res.body).toBe(201);
      // No API-key dialect: the account's platform decides (provider is refused beside account_id).
      expect(res.json()).toMatchObject({ account_id: acct.id, has_api_key: false, base_url: null, provider: null });
      await waitFor(() => codexHits(creds.access_token).length >= 2, { what: 'two Codex probes with the account token' });
      const id = res.json().id as number;
      await waitFor(async () => (await rt.services.monitors.get(id))!.last_probe.status === 200, { what: 'a passing probe recorded' });
      expect(JSON.parse(codexHits(creds.access_token)[0]!.body)).toMatchObject({ model: 'gpt-probe', store: false, stream: true });
      const renamed = await patch(`/api/v1/monitors/${id}`, { name: 'via-account-2' });
      expect(renamed.statusCode, renamed.body).toBe(200);
      expect(renamed.json().provider).toBeNull();
      const listed = (await http.inject({ url: '/api/v1/monitors', headers: auth })).json().monitors.find((m: { id: number }) => m.id === id);
      expect(listed).toMatchObject({ provider: null, account_id: acct.id });
      await http.inject({ method: 'DELETE', url: `/api/v1/monitors/${id}`, headers: auth });
    });

    it.sequential('a pass slower than its degraded_after is recorded as degraded, its 200 and its pass kept', async ({ expect }) => {
      up.set('m-degraded', { latencyMs: 250 });
      const res = await post('/api/v1/monitors', monitor('m-degraded', { degraded_after: '50ms' }));
      expect(res.statusCode, res.body).toBe(201);
      expect(res.json()).toMatchObject({ degraded_after_ms: 50, provider: 'openai' });
      const id = res.json().id as number;
      await waitFor(async () => (await rt.services.monitors.get(id))!.last_probe.at !== null, { what: 'a probe of the slow monitor recorded' });
      expect((await rt.services.monitors.get(id))!.last_probe).toMatchObject({ status: 200, error_class: 'degraded' });
      const first = (await sql.query(`SELECT ok, status, error_class, latency_ms FROM monitor_results WHERE monitor_id = $1 ORDER BY started_at LIMIT 1`, [id])).rows[0];
      expect(first).toMatchObject({ ok: true, status: 200, error_class: 'degraded' });
      expect(first.latency_ms).toBeGreaterThanOrEqual(250);
      await http.inject({ method: 'DELETE', url: `/api/v1/monitors/${id}`, headers: auth });
    });
  });

  describe.concurrent('account-test runner', () => {
    it('scheduled account tests: one result per occurrence, pruned to max_results, auto-recover only after a pass (audited)', async ({ expect }) => {
      const creds = codex.issue('broken', 3600);
      const acct = await rt.services.accounts.create({ platform: 'openai', name: 'broken', credentials: creds, tokenExpiresAt: null, status: 'error' });
      await sql.query(`UPDATE accounts SET status_reason = 'upstream said no', temp_unschedulable_until = now() + interval '1 hour', temp_unschedulable_reason = 'rate_limited' WHERE id = $1`, [
        acct.id,
      ]);
      codex.setBehaviour(creds.access_token, { mode: 'server_error' });
      const res = await post('/api/v1/account-tests', { account_id: acct.id, cron: '* * * * * *', model: 'gpt-test', max_results: 3, auto_recover: true });
      expect(res.statusCode, res.body).toBe(201);
      const plan = res.json().id as number;
      rt.services.accountTestRunner.start();
      await waitFor(async () => (await sql.query(`SELECT count(*)::int AS n FROM account_test_results WHERE plan_id = $1`, [plan])).rows[0].n >= 3, { what: 'three failed tests' });
      expect((await rt.services.accounts.get(acct.id))!.status).toBe('error');
      codex.setBehaviour(creds.access_token, { mode: 'ok' });
      await waitFor(async () => (await rt.services.accounts.get(acct.id))!.status === 'active', { what: 'recovered' });
      const a = (await rt.services.accounts.get(acct.id))!;
      expect(a).toMatchObject({ status: 'active', status_reason: null, temp_unschedulable_until: null });
      const view = (await http.inject({ url: `/api/v1/account-tests/${plan}`, headers: auth })).json();
      expect(view.results.length).toBeLessThanOrEqual(3);
      expect(view.results.find((r: { recovered: boolean }) => r.recovered)).toMatchObject({ ok: true });
      const audit = (await http.inject({ url: `/api/v1/account-tests/${plan}/audit`, headers: auth })).json().audit;
      expect(audit).toHaveLength(1);
      expect(audit[0]).toMatchObject({ action: 'auto_recover', detail: { plan_id: plan, previous: { status: 'error', temp_unschedulable_reason: 'rate_limited' } } });
      const hits = codexHits(creds.access_token);
      expect(hits.every((h) => (JSON.parse(h.body) as { model: string }).model === 'gpt-test')).toBe(true);
      const occurrences = hits.map((h) => h.headers['x-relay-probe-slot']);
      expect(new Set(occurrences).size).toBe(occurrences.length);
      await patch(`/api/v1/account-tests/${plan}`, { enabled: false });
    });
  });

  // After the concurrent blocks: it adds no database load beside the monitor runner's timing checks.
  it("a test or probe never sent is `auth` when the account has no usable token, `not_sent` when the trouble is the relay's own; either way the account is left as it is", async ({ expect }) => {
    // Credentials this master key cannot open (a wrong key, corrupted data): the relay's trouble.
    const sealedAway = codex.issue('unopenable', 3600);
    const unopenable = await rt.services.accounts.create({ platform: 'openai', name: 'unopenable', credentials: sealedAway, tokenExpiresAt: null, status: 'active' });
    await sql.query(`UPDATE accounts SET credentials_sealed = left(credentials_sealed, -8) || 'AAAAAAAA' WHERE id = $1`, [unopenable.id]);
    // An access token past its expiry and no refresh token: the account's own state.
    const expired = codex.issue('no-refresh', 3600);
    const noRefresh = await rt.services.accounts.create({
      platform: 'openai',
      name: 'no-refresh',
      credentials: { access_token: expired.access_token },
      tokenExpiresAt: new Date(Date.now() - 60_000),
      status: 'active',
    });
    const plans: number[] = [];
    for (const a of [unopenable, noRefresh]) {
      const res = await post('/api/v1/account-tests', { account_id: a.id, cron: '* * * * * *', model: 'gpt-test', max_results: 3, auto_recover: true });
      expect(res.statusCode, res.body).toBe(201);
      plans.push(res.json().id as number);
    }
    // The unopenable account's monitor too: its probe is `not_sent`, and the warning says why.
    const mon = await post('/api/v1/monitors', { name: 'unopenable', account_id: unopenable.id, model: 'gpt-test', interval: '1s', timeout: '800ms' });
    expect(mon.statusCode, mon.body).toBe(201);
    rt.services.monitorRunner.start();
    rt.services.accountTestRunner.start();
    const results = async () =>
      (await sql.query(`SELECT account_id, ok, status, error_class FROM account_test_results WHERE plan_id = ANY($1::bigint[]) ORDER BY account_id`, [plans])).rows as Array<{
        account_id: number;
        ok: boolean;
        status: number | null;
        error_class: string;
      }>;
    await waitFor(async () => new Set((await results()).map((r) => r.account_id)).size === 2, { what: 'a stored result for each account' });
    await waitFor(async () => (await rt.services.monitors.get(mon.json().id))!.last_probe.at !== null, { what: "the unopenable account's monitor probed" });
    expect((await rt.services.monitors.get(mon.json().id))!.last_probe).toMatchObject({ status: null, error_class: 'not_sent' });
    await http.inject({ method: 'DELETE', url: `/api/v1/monitors/${mon.json().id}`, headers: auth });
    for (const p of plans) await patch(`/api/v1/account-tests/${p}`, { enabled: false });
    const rows = await results();
    expect(
      rows.filter((r) => r.account_id === unopenable.id).every((r) => !r.ok && r.status === null && r.error_class === 'not_sent'),
      JSON.stringify(rows),
    ).toBe(true);
    expect(
      rows.filter((r) => r.account_id === noRefresh.id).every((r) => !r.ok && r.status === null && r.error_class === 'auth'),
      JSON.stringify(rows),
    ).toBe(true);
    for (const a of [unopenable, noRefresh]) expect((await rt.services.accounts.get(a.id))!).toMatchObject({ status: 'active', status_reason: null, temp_unschedulable_until: null });
    expect((await sql.query(`SELECT count(*)::int AS n FROM account_audit WHERE account_id = ANY($1::bigint[])`, [[unopenable.id, noRefresh.id]])).rows[0].n).toBe(0);
    expect(codexHits(expired.access_token)).toEqual([]);
    // The log names the class and the cause, never a credential.
    const warned = logs.lines.filter((l) => l.msg === 'account test could not start');
    expect(warned.some((l) => l.error_class === 'not_sent' && /cannot decrypt/.test(String(l.err)))).toBe(true);
    expect(warned.some((l) => l.error_class === 'auth' && /refresh token/.test(String(l.err)))).toBe(true);
    expect(logs.lines.some((l) => l.msg === 'monitor probe could not start' && l.error_class === 'not_sent' && /cannot decrypt/.test(String(l.err)))).toBe(true);
    for (const secret of [sealedAway.access_token, sealedAway.refresh_token, expired.access_token]) expect(logs.text()).not.toContain(secret);
  });

  it('serves history: raw probes for short ranges, minute rollups from the fenced watermark for long ones', async () => {
    const id = (await sql.query(`SELECT id FROM monitors WHERE name = 'm-fast'`)).rows[0].id as number;
    // Pretend the probes happened a few minutes ago, so complete minutes exist to roll up.
    await sql.query(`UPDATE monitor_results SET started_at = started_at - interval '5 minutes'`);
    const h = rt.services.monitorHistory;
    const r1 = await h.rollUp(10, { trailingMs: 600_000, bootstrapMs: 3_600_000, maxSpanMs: 86_400_000 });
    expect(r1.rows).toBeGreaterThan(0);
    await expect(h.rollUp(9, { trailingMs: 600_000, bootstrapMs: 3_600_000, maxSpanMs: 86_400_000 })).rejects.toThrow(/newer fence/);
    const from = new Date(Date.now() - 6 * 3_600_000).toISOString();
    const long = (await http.inject({ url: `/api/v1/monitors/${id}/history?from=${encodeURIComponent(from)}`, headers: auth })).json();
    expect(long.resolution).toBe('minute');
    const probes = long.points.reduce((s: number, p: { probes: number }) => s + p.probes, 0);
    const stored = (await sql.query(`SELECT count(*)::int AS n FROM monitor_results WHERE monitor_id = $1`, [id])).rows[0].n;
    expect(probes).toBe(stored);
    expect(long.points[0]).toMatchObject({ availability: expect.any(Number), p50_ms: expect.any(Number) });
    const shortFrom = new Date(Date.now() - 3_600_000).toISOString();
    const short = (await http.inject({ url: `/api/v1/monitors/${id}/history?from=${encodeURIComponent(shortFrom)}`, headers: auth })).json();
    expect(short.resolution).toBe('raw');
    expect(short.points.length).toBe(stored);
    const bad = await http.inject({ url: `/api/v1/monitors/${id}/history?from=yesterday`, headers: auth });
    expect(bad.statusCode).toBe(400);
    expect(fields(bad)).toContain('from');
  });
  it('scheduled_account_test rounds report the tests that ran since the previous round', async () => {
    const first = await rt.scheduler.runNow('scheduled_account_test');
    expect(first.ran && first.outcome.status, JSON.stringify(first)).toBe('ok');
    expect(first.ran && first.outcome.items).toBeGreaterThanOrEqual(3);
    expect(first.ran && first.outcome.note).toMatch(/^\d+ tests ran since an hour ago \(\d+ failed\)/);
    // Counted once: the next round starts from where this one counted to (no plan is enabled now).
    const second = await rt.scheduler.runNow('scheduled_account_test');
    expect(second.ran && [second.outcome.status, second.outcome.items]).toEqual(['no_work', 0]);
  });

  it('a probe runner that leaves due work waiting makes its job late, saying how much', async () => {
    await rt.services.monitorRunner.stop(Deadline.within(systemClock, 2000));
    await rt.services.accountTestRunner.stop(Deadline.within(systemClock, 2000));
    for (const job of ['channel_monitor', 'scheduled_account_test']) await rt.scheduler.runNow(job);
    const health = async (name: string) => (await rt.jobViews()).find((j) => j.name === name)!;
    // Nothing overdue yet from these two (earlier monitors are disabled or leased): no verdict from the hook.
    await sql.query(`UPDATE monitors SET enabled = false`);
    expect((await health('channel_monitor')).health).toBe('healthy');

    const m = await post('/api/v1/monitors', monitor('m-missed', { interval: '10s' }));
    expect(m.statusCode, m.body).toBe(201);
    await sql.query(`UPDATE monitors SET next_due_at = now() - interval '1 minute', lease_until = NULL WHERE id = $1`, [m.json().id]);
    const cm = await health('channel_monitor');
    expect(cm.health).toBe('late');
    expect(cm.health_reason).toMatch(/^1 monitor\(s\) a whole interval past due, the oldest due since .*no replica's probe runner is taking them/);

    const acct = await rt.services.accounts.create({ platform: 'openai', name: 'plan-missed', credentials: { access_token: 'plan-missed-token' }, tokenExpiresAt: null });
    const p = await post('/api/v1/account-tests', { account_id: acct.id, cron: '* * * * *', model: 'gpt-test' });
    expect(p.statusCode, p.body).toBe(201);
    await sql.query(`UPDATE account_test_plans SET next_run_at = now() - interval '5 minutes' WHERE id = $1`, [p.json().id]);
    const at = await health('scheduled_account_test');
    expect(at.health).toBe('late');
    expect(at.health_reason).toMatch(/^1 test plan\(s\) more than a minute past their next run/);
    await sql.query(`UPDATE monitors SET enabled = false`);
    await sql.query(`UPDATE account_test_plans SET enabled = false`);
    expect((await health('channel_monitor')).health).toBe('healthy');
  });

  /** A runner over a fake store that records the order of its claims and writes; `leaseMs` is each claim's lease. */
  const orderedRunner = (clock: Clock, leaseMs: number) => {
    const calls: string[] = [];
    const due: ClaimedMonitor[] = [];
    const monitor = (id: number): ClaimedMonitor => {
      const now = clock.now();
      return {
        id,
        fence: 1,
        scheduledFor: new Date(now),
        claimedAt: new Date(now),
        leaseUntil: new Date(now + leaseMs),
        missed: 0,
        baseUrl: up.url,
        model: 'm',
        apiKey: `order-${id}`,
        accountId: null,
        intervalMs: 60_000,
        timeoutMs: 2000,
        provider: 'openai',
        challenge: false,
        degradedAfterMs: null,
        dueNow: false,
      };
    };
    const monitors = {
      claim: async () => {
        calls.push(`claim ${due.map((m) => m.id).join(',')}`);
        return { claimed: due.splice(0), skipped: 0 };
      },
      complete: async (_owner: string, results: Array<{ monitorId: number }>) => {
        calls.push(`write ${results.map((r) => r.monitorId).join(',')}`);
        return 0;
      },
    } as unknown as Monitors;
    const runner = new MonitorRunner(monitors, new ProbeClient(), {} as AccountTester, clock, rt.metrics, silentLogger(), {
      instanceId: 'order',
      poolSize: 4,
      claimBatch: 4,
      pollMs: 100,
      leaseGraceMs: 1000,
      lateAfterMs: 1000,
      degradedAfterMs: 5000,
    });
    return { calls, runner, due: (id: number) => due.push(monitor(id)) };
  };

  it('a pass claims and starts due monitors before it writes finished results: a new monitor is not behind that write (issue 26)', async () => {
    const { calls, runner, due } = orderedRunner(systemClock, 10_000);
    due(1);
    await runner.tick();
    await waitFor(() => runner.inFlight === 0, { what: 'the first probe finished' });
    due(2); // created while monitor 1's result waits to be written
    await runner.tick();
    expect(calls).toEqual(['claim 1', 'claim 2', 'write 1']);
    await runner.stop(Deadline.within(systemClock, 2000));
  });

  it("a result whose lease is ending is written before the pass's claim: its own monitor, due again, is not claimed over it (its result would be fenced out)", async () => {
    const clock = new ManualClock();
    // Lease 3 s with a 1 s grace: the probe may run 2.5 s; the result must be written before the lease is within 0.5 s of its end.
    const { calls, runner, due } = orderedRunner(clock, 3000);
    due(1);
    await runner.tick();
    await waitFor(() => runner.inFlight === 0, { what: 'the first probe finished' });
    await clock.advance(2000); // 1 s of lease left: the result can still wait behind a claim
    due(2);
    await runner.tick();
    expect(calls).toEqual(['claim 1', 'claim 2', 'write 1']);
    await waitFor(() => runner.inFlight === 0, { what: 'the second probe finished' });
    await clock.advance(2500); // a loaded replica's next pass: monitor 2's lease is 0.5 s from its end, and monitor 1 is due again
    due(1);
    await runner.tick();
    expect(calls.slice(3)).toEqual(['write 2', 'claim 1']);
    await runner.stop(Deadline.within(systemClock, 2000));
  });
});

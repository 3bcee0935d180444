import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import fc from 'fast-check';
import pg from 'pg';
import { loadConfig } from '../src/config/load.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const ADMIN = 'fuzz-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
const RUNS = Number(process.env.RELAY_JOBS_FUZZ_RUNS ?? 30);

/** Tables an API request may write; a 4xx answer must leave every one of them as it was. */
const TABLES = [
  'accounts', 'proxies', 'billing_users', 'plans', 'subscriptions', 'payment_orders', 'payment_order_events', 'notification_settings',
  'usage_logs', 'usage_request_ids', 'usage_cleanup_tasks', 'idempotency_records', 'platform_quota_usage', 'dead_letters', 'admin_sessions',
];

// Text that breaks naive code: NUL, lone surrogates, huge, unicode, look-alikes of valid values.
const nasty = fc.constantFrom('\u0000', 'a\u0000b', '\ud800', 'x\udfffy', '', ' ', '__proto__', 'constructor', '💥', '1e309', '-1', '2026-11-30T00:00:00Z', '1970-01-01T00:00:00Z', '9999-12-31T23:59:59Z', 'http://[::1:bad', 'http://u:p@127.0.0.1:9', 'openai', 'demo', 'balance', 'subscription', 'hour', 'day', 'active');
const text = fc.oneof(fc.string(), fc.string({ unit: 'binary', maxLength: 40 }), nasty);
const num = fc.oneof(fc.integer(), fc.constantFrom(0, 1, 2, -1, 1e15, 2 ** 53, Number.MAX_SAFE_INTEGER), fc.double());
const scalar = fc.oneof(text, num, fc.boolean(), fc.constant(null));
const value = fc.oneof({ depthSize: 'small' }, scalar, fc.array(scalar, { maxLength: 4 }), fc.dictionary(text, scalar, { maxKeys: 4 }), fc.jsonValue({ maxDepth: 3 }));

/** A body shaped like the route's: its own field names (some missing, some extra) with values from anywhere. */
const shaped = (fields: Record<string, fc.Arbitrary<unknown>>) =>
  fc.oneof(
    fc.record(Object.fromEntries(Object.entries(fields).map(([k, a]) => [k, fc.oneof(a, value)])), { requiredKeys: [] }),
    fc.tuple(fc.record(Object.fromEntries(Object.entries(fields).map(([k, a]) => [k, a])), { requiredKeys: [] }), fc.dictionary(text, value, { maxKeys: 2 })).map(([a, b]) => ({ ...b, ...a })),
    value,
  );
const list = (item: fc.Arbitrary<unknown>) => fc.array(item, { maxLength: 4 });
const usageEvent = shaped({ request_id: text, user_id: fc.oneof(text, num), platform: text, model: text, input_tokens: num, output_tokens: num, cost: fc.oneof(text, num), created_at: text, latency_ms: num, status_code: num });
const creds = shaped({ access_token: text, refresh_token: text, expires_at: text });

interface Route {
  method: 'POST' | 'PATCH' | 'PUT' | 'GET';
  url: string;
  body?: fc.Arbitrary<unknown>;
  query?: fc.Arbitrary<Record<string, string>>;
}

// Every JSON route of the API. Left out: /usage/recompute (a valid wide range starts a background rebuild; bounded
// separately), /jobs/:name/run (starts rounds), /accounts/:id/refresh and /token (call the provider).
const ROUTES: Route[] = [
  { method: 'POST', url: '/api/v1/usage', body: shaped({ events: list(usageEvent) }) },
  { method: 'POST', url: '/api/v1/usage/cleanup-tasks', body: shaped({ from: text, to: text, user_id: text, account_id: fc.oneof(text, num) }) },
  { method: 'POST', url: '/api/v1/idempotency/begin', body: shaped({ scope: text, key: text, request: value, request_hash: text }) },
  { method: 'POST', url: '/api/v1/idempotency/complete', body: shaped({ scope: text, key: text, request: value, request_hash: text, response: value, status_code: num }) },
  { method: 'POST', url: '/api/v1/quota/usage', body: shaped({ increments: list(shaped({ user_id: fc.oneof(text, num), platform: text, amount: num })) }) },
  { method: 'POST', url: '/api/v1/accounts', body: shaped({ platform: text, name: text, credentials: creds, proxy_id: num, expires_at: text, schedulable: fc.boolean() }) },
  { method: 'PATCH', url: '/api/v1/accounts/1', body: shaped({ name: text, credentials: creds, status: text, proxy_id: num, expires_at: text }) },
  { method: 'POST', url: '/api/v1/accounts/import', body: shaped({ accounts: list(shaped({ platform: text, name: text, credentials: creds })) }) },
  { method: 'POST', url: '/api/v1/accounts/1/unauthorized', body: shaped({ token_version: num }) },
  { method: 'POST', url: '/api/v1/proxies', body: shaped({ name: text, url: text, expires_at: text, fallback_mode: text, backup_proxy_id: num }) },
  { method: 'PATCH', url: '/api/v1/proxies/1', body: shaped({ name: text, url: text, status: text, backup_proxy_id: num }) },
  { method: 'POST', url: '/api/v1/billing/users', body: shaped({ external_id: text, email: text }) },
  { method: 'POST', url: '/api/v1/billing/plans', body: shaped({ name: text, price: num, duration_days: num }) },
  { method: 'POST', url: '/api/v1/billing/subscriptions', body: shaped({ user_id: num, plan_id: num, starts_at: text, expires_at: text }) },
  { method: 'POST', url: '/api/v1/billing/orders', body: shaped({ user_id: num, amount: num, provider: text, provider_order_id: text, purpose: text, plan_id: num, expires_at: text }) },
  { method: 'PUT', url: '/api/v1/notifications/settings', body: shaped({ reminders_enabled: fc.boolean(), reminder_days: list(num) }) },
  { method: 'POST', url: '/api/v1/payments/webhook/demo', body: shaped({ event_id: text, provider_order_id: text, amount: num, status: text }) },
  { method: 'GET', url: '/api/v1/dashboard/usage', query: fc.dictionary(fc.constantFrom('from', 'to', 'granularity', 'group_by', 'user_id', 'model', 'x'), text, { maxKeys: 5 }) },
  { method: 'GET', url: '/api/v1/accounts', query: fc.dictionary(fc.constantFrom('status', 'platform', 'limit', 'after', 'x'), text, { maxKeys: 3 }) },
  { method: 'GET', url: '/api/v1/notifications', query: fc.dictionary(fc.constantFrom('status', 'limit', 'x'), text, { maxKeys: 3 }) },
  { method: 'GET', url: '/api/v1/dead-letters', query: fc.dictionary(fc.constantFrom('source', 'limit', 'after', 'x'), text, { maxKeys: 3 }) },
];

/**
 * Every JSON route with generated bodies (fast-check, issue 10): never a 500, nothing written by
 * a refused request (every API table and the quota dirty set unchanged after a 4xx), and the
 * process still serves afterwards. A failure prints the seed and the shrunk body.
 */
describe('fuzzing every JSON route (real PostgreSQL and Redis)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  const prefix = uniqueName('rjfuzz');
  const snapshot = async () => {
    const { rows } = await sql.query(`SELECT ${TABLES.map((t) => `(SELECT count(*) FROM ${t})::int AS ${t}`).join(', ')}`);
    return { ...rows[0], quota_dirty: await rt.services.quota.dirtyCount() };
  };

  beforeAll(async () => {
    db = await freshDatabase();
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    rt = await Runtime.create(
      loadConfig({
        env: {
          DATABASE_URL: db.url,
          REDIS_URL,
          RELAY_JOBS_INSTANCE_ID: 'fuzz-1',
          RELAY_JOBS_ENV: 'test',
          RELAY_JOBS_ADMIN_TOKEN: ADMIN,
          RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
          RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
          RELAY_JOBS__DATABASE__POOL_SIZE: '4',
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: 'http://127.0.0.1:9/oauth/token',
          RELAY_JOBS__PAYMENTS__PROVIDERS__DEMO__BASE_URL: 'http://127.0.0.1:9',
          RELAY_JOBS__PAYMENTS__PROVIDERS__DEMO__WEBHOOK_SECRET: 'demo-webhook-secret-0123456789',
        },
      }),
      { logger: silentLogger() },
    );
    http = buildHttpServer(rt);
    // Something for the id routes to find.
    await http.inject({ method: 'POST', url: '/api/v1/accounts', headers: auth, payload: { platform: 'openai', name: 'seed', credentials: { access_token: 'seed-token' } } });
    await http.inject({ method: 'POST', url: '/api/v1/proxies', headers: auth, payload: { name: 'seed', url: 'http://127.0.0.1:9' } });
  });
  afterAll(async () => {
    await rt.shutdown();
    await http.close();
    await sql.end();
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  for (const route of ROUTES) {
    it(`${route.method} ${route.url}: no 500, no write on refusal`, async () => {
      const input = route.body ?? route.query!;
      await fc.assert(
        fc.asyncProperty(input, async (generated) => {
          const before = await snapshot();
          const url = route.query ? `${route.url}?${new URLSearchParams(generated as Record<string, string>)}` : route.url;
          const payload = route.body ? JSON.stringify(generated) ?? 'null' : undefined;
          const res = await http.inject({ method: route.method, url, headers: { ...auth, ...(payload !== undefined ? { 'content-type': 'application/json' } : {}) }, payload });
          if (res.statusCode >= 500) throw new Error(`${res.statusCode} ${res.body}`);
          if (res.statusCode >= 400) expect(await snapshot()).toEqual(before);
        }),
        { numRuns: RUNS },
      );
    }, 120_000);
  }

  it('still serves afterwards', async () => {
    expect((await http.inject('/healthz')).statusCode).toBe(200);
    expect((await http.inject('/readyz')).json()).toMatchObject({ ready: true });
    const ok = await http.inject({ method: 'POST', url: '/api/v1/usage', headers: auth, payload: { events: [{ request_id: 'after-fuzz', user_id: 'u', platform: 'openai', model: 'm', input_tokens: 1, output_tokens: 1, cost: '0.1' }] } });
    expect(ok.statusCode, ok.body).toBe(200);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import fc from 'fast-check';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const ADMIN = 'fuzz-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
const RUNS = Number(process.env.RELAY_JOBS_FUZZ_RUNS ?? 30);

/** Tables an API request may write; a 4xx answer must leave every one of them as it was. */
const TABLES = [
  'accounts',
  'proxies',
  'billing_users',
  'plans',
  'subscriptions',
  'payment_orders',
  'payment_order_events',
  'notification_settings',
  'usage_logs',
  'usage_request_ids',
  'usage_cleanup_tasks',
  'idempotency_records',
  'platform_quota_usage',
  'dead_letters',
  'admin_sessions',
];

// Text that breaks naive code: NUL, lone surrogates, huge, unicode, look-alikes of valid values.
const nasty = fc.constantFrom(
  '\u0000',
  'a\u0000b',
  '\ud800',
  'x\udfffy',
  '',
  ' ',
  '__proto__',
  'constructor',
  '💥',
  '1e309',
  '-1',
  '2026-11-30T00:00:00Z',
  '1970-01-01T00:00:00Z',
  '9999-12-31T23:59:59Z',
  'http://[::1:bad',
  'http://u:p@127.0.0.1:9',
  'openai',
  'demo',
  'balance',
  'subscription',
  'hour',
  'day',
  'active',
);
const text = fc.oneof(fc.string(), fc.string({ unit: 'binary', maxLength: 40 }), nasty);
const num = fc.oneof(fc.integer(), fc.constantFrom(0, 1, 2, -1, 1e15, 2 ** 53, Number.MAX_SAFE_INTEGER), fc.double());
const scalar = fc.oneof(text, num, fc.boolean(), fc.constant(null));
const value = fc.oneof({ depthSize: 'small' }, scalar, fc.array(scalar, { maxLength: 4 }), fc.dictionary(text, scalar, { maxKeys: 4 }), fc.jsonValue({ maxDepth: 3 }));

/** Valid-looking text that may carry poison (NUL, lone surrogates): what passes a schema and then reaches the database. */
const word = fc.oneof(fc.string({ minLength: 1, maxLength: 12 }), fc.constantFrom('a\u0000b', '\ud800', 'x\udfffy', 'ok', '💥'));
const recent = fc.integer({ min: -20, max: 20 }).map((h) => new Date(Date.now() + h * 3_600_000).toISOString());
const small = fc.integer({ min: 1, max: 3 });

/**
 * A body shaped like the route's: all fields plausible (so validation passes and the request
 * reaches the database), or one field replaced by anything, or fields missing or extra, or any value.
 */
const shaped = (fields: Record<string, fc.Arbitrary<unknown>>) => {
  const keys = Object.keys(fields);
  const good = fc.record(fields, { requiredKeys: [] });
  return fc.oneof(
    good,
    fc.tuple(good, fc.constantFrom(...keys), value).map(([b, k, v]) => ({ ...b, [k]: v })),
    fc.tuple(good, fc.dictionary(text, value, { maxKeys: 2 })).map(([a, b]) => ({ ...b, ...a })),
    value,
  );
};
const list = (item: fc.Arbitrary<unknown>) => fc.array(item, { minLength: 1, maxLength: 4 });
const usageEvent = shaped({
  request_id: word,
  user_id: fc.oneof(word, small),
  platform: word,
  model: word,
  input_tokens: small,
  output_tokens: small,
  cost: fc.constantFrom('0.1', '1', 0.5),
  created_at: recent,
  latency_ms: small,
  status_code: fc.constantFrom(200, 500),
});
const creds = shaped({ access_token: word, refresh_token: word, expires_at: recent });

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
  {
    method: 'POST',
    url: '/api/v1/usage/cleanup-tasks',
    body: shaped({ from: recent, to: fc.constantFrom(new Date(Date.now() + 86_400_000).toISOString()), user_id: word, account_id: fc.oneof(word, small) }),
  },
  { method: 'POST', url: '/api/v1/idempotency/begin', body: shaped({ scope: word, key: word, request: value }) },
  { method: 'POST', url: '/api/v1/idempotency/complete', body: shaped({ scope: word, key: word, request: value, response: value, status_code: fc.constantFrom(200, 404) }) },
  { method: 'POST', url: '/api/v1/quota/usage', body: shaped({ increments: list(shaped({ user_id: fc.oneof(word, small), platform: word, amount: small })) }) },
  { method: 'POST', url: '/api/v1/accounts', body: shaped({ platform: fc.constantFrom('openai'), name: word, credentials: creds, expires_at: recent, schedulable: fc.boolean() }) },
  { method: 'PATCH', url: '/api/v1/accounts/1', body: shaped({ name: word, credentials: creds, status: fc.constantFrom('active', 'disabled'), proxy_id: fc.constantFrom(1), expires_at: recent }) },
  { method: 'POST', url: '/api/v1/accounts/import', body: shaped({ accounts: list(shaped({ platform: fc.constantFrom('openai'), name: word, credentials: creds })) }) },
  { method: 'POST', url: '/api/v1/accounts/1/unauthorized', body: shaped({ token_version: small }) },
  {
    method: 'POST',
    url: '/api/v1/proxies',
    body: shaped({
      name: word,
      url: fc.oneof(
        fc.constantFrom('http://127.0.0.1:9', 'http://u:p@127.0.0.1:9', 'http://[::1:bad', 'https://h:1'),
        word.map((w) => `http://${w}`),
      ),
      expires_at: recent,
      fallback_mode: fc.constantFrom('none', 'direct'),
      backup_proxy_id: fc.constantFrom(1),
    }),
  },
  {
    method: 'PATCH',
    url: '/api/v1/proxies/1',
    body: shaped({ name: word, url: fc.constantFrom('http://127.0.0.1:9', 'http://[::1:bad'), status: fc.constantFrom('active', 'disabled'), backup_proxy_id: fc.constantFrom(1, 2) }),
  },
  { method: 'POST', url: '/api/v1/billing/users', body: shaped({ external_id: word, email: fc.constantFrom('a@b.test', 'a\u0000@b.test') }) },
  { method: 'POST', url: '/api/v1/billing/plans', body: shaped({ name: word, price: small, duration_days: small }) },
  { method: 'POST', url: '/api/v1/billing/subscriptions', body: shaped({ user_id: small, plan_id: small, starts_at: recent, expires_at: recent }) },
  {
    method: 'POST',
    url: '/api/v1/billing/orders',
    body: shaped({ user_id: small, amount: small, provider: fc.constantFrom('demo'), provider_order_id: word, purpose: fc.constantFrom('balance'), expires_at: recent }),
  },
  { method: 'PUT', url: '/api/v1/notifications/settings', body: shaped({ reminders_enabled: fc.boolean(), reminder_days: list(small) }) },
  { method: 'POST', url: '/api/v1/payments/webhook/demo', body: shaped({ event_id: word, provider_order_id: word, amount: small, status: fc.constantFrom('paid') }) },
  {
    method: 'GET',
    url: '/api/v1/dashboard/usage',
    query: fc.record({ from: recent, to: fc.constant(new Date(Date.now() + 86_400_000).toISOString()), user_id: word, model: word, x: text }, { requiredKeys: ['from', 'to'] }),
  },
  { method: 'GET', url: '/api/v1/accounts', query: fc.record({ status: fc.constantFrom('active', 'x'), platform: word, limit: fc.constantFrom('1', '0', 'x'), after: text }, { requiredKeys: [] }) },
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
    db = await freshDatabase({ migrated: true });
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
          // A week of usage (11 daily partitions, not 94): every snapshot counts usage_logs twice a request.
          RELAY_JOBS__USAGE__RETENTION: '7d',
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
          const payload = route.body ? (JSON.stringify(generated) ?? 'null') : undefined;
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
    const ok = await http.inject({
      method: 'POST',
      url: '/api/v1/usage',
      headers: auth,
      payload: { events: [{ request_id: 'after-fuzz', user_id: 'u', platform: 'openai', model: 'm', input_tokens: 1, output_tokens: 1, cost: '0.1' }] },
    });
    expect(ok.statusCode, ok.body).toBe(200);
  });
});

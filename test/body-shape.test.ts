import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer, registeredRoutes } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const ADMIN = 'body-shape-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };

/** A value for each path parameter: the route is found, whatever the id names. */
const PARAM_VALUES: Record<string, string> = { name: 'canary', provider: 'fake', user: 'u1', platform: 'openai' };
const fill = (url: string) => url.replace(/:([A-Za-z_]+)/g, (_m, p: string) => PARAM_VALUES[p] ?? '1');

/**
 * The payment webhook is outside the admin API: its body is the provider's own bytes, read raw and
 * authenticated by its HMAC signature before anything parses it (an unconfigured provider is 404
 * before the body is read). Every other route with a body is in the sweep.
 */
const OUTSIDE_THE_ADMIN_API = /^\/api\/v1\/payments\/webhook\//;
const BAD_BODIES: Array<[string, string]> = [
  ['null', 'null'],
  ['[]', 'an array'],
  ['"x"', 'a string'],
  ['1', 'a number'],
];

/**
 * Issue 51, point 6: every JSON body must be an object (no route takes an array body today);
 * anything else is a 400 naming `body`, on every route of the table, and numeric query parameters
 * are range-checked before a handler (or SQL) sees them. The route table comes from the server
 * itself (`registeredRoutes`, an onRoute hook), so a route added later is swept too.
 */
describe('body shapes and numeric query parameters over the whole route table', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  const prefix = uniqueName('rjbody');
  const rowCounts = async () =>
    (
      await sql.query<{ n: string }>(
        `SELECT (SELECT count(*) FROM billing_users) + (SELECT count(*) FROM admin_sessions) + (SELECT count(*) FROM monitors) + (SELECT count(*) FROM accounts) + (SELECT count(*) FROM proxies) AS n`,
      )
    ).rows[0]!.n;

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'body-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    await http.ready();
  });
  afterAll(async () => {
    await rt?.shutdown();
    await http?.close();
    await sql?.end();
    await db?.drop();
    await dropRedisPrefix(prefix);
  });

  it('every POST, PATCH and PUT route answers null, [], "x" and 1 with 400 naming body, and writes nothing', async () => {
    const routes = registeredRoutes(http).filter((r) => ['POST', 'PATCH', 'PUT'].includes(r.method) && r.url !== '/api/v1/*' && !OUTSIDE_THE_ADMIN_API.test(r.url));
    // The table is the real one: the routes the issue names are in it.
    expect(routes.map((r) => `${r.method} ${r.url}`)).toEqual(expect.arrayContaining(['POST /api/v1/sessions', 'POST /api/v1/billing/users', 'POST /api/v1/usage', 'PATCH /api/v1/accounts/:id']));
    expect(routes.length).toBeGreaterThan(30);
    const before = await rowCounts();
    const wrong: string[] = [];
    for (const r of routes) {
      for (const [payload, kind] of BAD_BODIES) {
        const res = await http.inject({ method: r.method as 'POST', url: fill(r.url), headers: { ...auth, 'content-type': 'application/json' }, payload });
        const body = String(res.headers['content-type']).includes('json') ? res.json() : null;
        const named = body?.error?.fields?.some((f: { field: string; message: string }) => f.field === 'body' && f.message.includes(kind));
        if (res.statusCode !== 400 || !named) wrong.push(`${r.method} ${r.url} ${payload}: ${res.statusCode} ${res.body.slice(0, 160)}`);
      }
    }
    expect(wrong).toEqual([]);
    expect(await rowCounts()).toBe(before);
  });

  it('a route that takes no body refuses one with fields (named when they look like names) and writes nothing; {} and no body reach it', async () => {
    const bodiless = registeredRoutes(http).filter((r) => ['POST', 'PATCH', 'PUT', 'DELETE'].includes(r.method) && r.contract && !r.contract.contract.body && !r.contract.contract.rawBody);
    expect(bodiless.map((r) => `${r.method} ${r.url}`)).toEqual(expect.arrayContaining(['POST /api/v1/quota/:user/:platform/reset', 'POST /api/v1/jobs/:name/run']));
    const before = await rowCounts();
    const epoch = await rt.db.query(`SELECT count(*)::int AS n FROM job_runs`);
    const wrong: string[] = [];
    for (const r of bodiless) {
      const res = await http.inject({ method: r.method as 'POST', url: fill(r.url), headers: auth, payload: { amount: 5, 'sk-not a name': 1 } });
      const fields = String(res.headers['content-type']).includes('json') ? res.json().error?.fields : null;
      if (res.statusCode !== 400 || JSON.stringify(fields) !== JSON.stringify([{ field: 'body', message: 'this route takes no body (got amount and 1 more)' }]))
        wrong.push(`${r.method} ${r.url}: ${res.statusCode} ${res.body.slice(0, 160)}`);
    }
    expect(wrong).toEqual([]);
    expect(await rowCounts()).toBe(before);
    expect((await rt.db.query(`SELECT count(*)::int AS n FROM job_runs`)).rows[0]).toEqual(epoch.rows[0]);
    const unnamed = await http.inject({ method: 'POST', url: '/api/v1/quota/u1/openai/reset', headers: auth, payload: { 'Bearer abc': 1 } });
    expect(unnamed.json().error.fields).toEqual([{ field: 'body', message: 'this route takes no body (got 1 field)' }]);
    for (const payload of [undefined, {}]) {
      const ok = await http.inject({ method: 'POST', url: '/api/v1/quota/u1/openai/reset', headers: auth, ...(payload ? { payload } : {}) });
      expect(ok.statusCode, ok.body).toBe(200);
    }
  });

  it('a text/plain body is refused the same way; an absent body and an object still reach the route', async () => {
    const text = await http.inject({ method: 'POST', url: '/api/v1/billing/users', headers: { ...auth, 'content-type': 'text/plain' }, payload: 'x' });
    expect(text.statusCode).toBe(400);
    expect(text.json().error.fields).toEqual([{ field: 'body', message: 'expected a JSON object, got a string' }]);
    const none = await http.inject({ method: 'POST', url: '/api/v1/sessions', headers: auth });
    expect(none.statusCode, none.body).toBe(201);
    const obj = await http.inject({ method: 'POST', url: '/api/v1/sessions', headers: auth, payload: {} });
    expect(obj.statusCode, obj.body).toBe(201);
    expect(obj.json().token).toEqual(expect.any(String));
  });

  it('POST /sessions takes `cookie` as a strict boolean: "yes" is 400 naming cookie, not a bearer token', async () => {
    const res = await http.inject({ method: 'POST', url: '/api/v1/sessions', headers: auth, payload: { cookie: 'yes' } });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().error.fields).toEqual([{ field: 'cookie', message: 'expected true or false' }]);
    expect(res.body).not.toMatch(/token/);
    const unknown = await http.inject({ method: 'POST', url: '/api/v1/sessions', headers: auth, payload: { cookies: true } });
    expect(unknown.statusCode).toBe(400);
  });

  it('every GET route refuses after_id=1e400, after=1e400, limit=-5, limit=abc and a repeated limit with 400 naming the parameter', async () => {
    // The event stream is a long-lived reply (its bad query is refused by the same hook, checked below with a real answer).
    const lists = registeredRoutes(http).filter((r) => r.method === 'GET' && r.url.startsWith('/api/v1/') && r.url !== '/api/v1/*' && r.url !== '/api/v1/events');
    expect(lists.map((r) => r.url)).toEqual(expect.arrayContaining(['/api/v1/monitors', '/api/v1/account-tests', '/api/v1/accounts', '/api/v1/dead-letters', '/api/v1/billing/users']));
    const cases: Array<[string, string]> = [
      ['after_id=1e400', 'query.after_id'],
      ['after=1e400', 'query.after'],
      ['limit=-5', 'query.limit'],
      ['limit=abc', 'query.limit'],
      ['limit=1&limit=2', 'query.limit'],
      ['cursor=99999999999999999999', 'query.cursor'],
    ];
    const wrong: string[] = [];
    for (const r of lists) {
      for (const [query, field] of cases) {
        const res = await http.inject({ method: 'GET', url: `${fill(r.url)}?${query}`, headers: auth });
        const named = String(res.headers['content-type']).includes('json') && res.json().error?.fields?.some((f: { field: string }) => f.field === field);
        if (res.statusCode !== 400 || !named) wrong.push(`GET ${r.url}?${query}: ${res.statusCode} ${res.body.slice(0, 160)}`);
      }
    }
    expect(wrong).toEqual([]);
    // The stream's hook runs before it is hijacked: a plain 400, no stream opened.
    const stream = await http.inject({ method: 'GET', url: '/api/v1/events?limit=-5', headers: auth });
    expect(stream.statusCode).toBe(400);
    // In range, the lists answer.
    for (const url of ['/api/v1/monitors?after_id=0&limit=5', '/api/v1/account-tests?limit=1000', '/api/v1/accounts?after=3&limit=10']) {
      const res = await http.inject({ method: 'GET', url, headers: auth });
      expect(res.statusCode, `${url}: ${res.body}`).toBe(200);
    }
  });
});

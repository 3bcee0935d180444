import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const ADMIN = 'growth-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };

/** Nothing an unauthenticated caller sends may grow without bound (issue 10). */
describe('unauthenticated growth (real PostgreSQL and Redis)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  const prefix = uniqueName('rjgrow');

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'grow-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__PAYMENTS__PROVIDERS__DEMO__BASE_URL: 'http://127.0.0.1:9',
        RELAY_JOBS__PAYMENTS__PROVIDERS__DEMO__WEBHOOK_SECRET: 'demo-webhook-secret-0123456789',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
  });
  afterAll(async () => {
    await rt.shutdown();
    await http.close();
    await sql.end();
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  it('a webhook for an unknown provider is a 404 with no row and no new metric label', async () => {
    const before = (await http.inject('/metrics')).body.length;
    for (let i = 0; i < 200; i++) {
      const res = await http.inject({ method: 'POST', url: `/api/v1/payments/webhook/nosuch${i}`, headers: { 'content-type': 'application/json' }, payload: '{}' });
      expect(res.statusCode).toBe(404);
    }
    const metrics = (await http.inject('/metrics')).body;
    expect(metrics).not.toContain('nosuch');
    expect(metrics.length - before).toBeLessThan(2000);
    expect(Number((await sql.query(`SELECT count(*) AS n FROM payment_order_events`)).rows[0].n)).toBe(0);
    // A configured provider still gets its verdict (unsigned: 401), with its own label only.
    expect((await http.inject({ method: 'POST', url: '/api/v1/payments/webhook/demo', headers: { 'content-type': 'application/json' }, payload: '{}' })).statusCode).toBe(401);
  });

  it('checks the token before reading the body: an unauthenticated 10 MB or malformed body is a 401, not a 413 or 400', async () => {
    const big = JSON.stringify({ accounts: [{ name: 'x'.repeat(10 * 1024 * 1024) }] });
    for (const headers of [{}, { authorization: 'Bearer wrong' }]) {
      const res = await http.inject({ method: 'POST', url: '/api/v1/accounts/import', headers: { ...headers, 'content-type': 'application/json' }, payload: big });
      expect(res.statusCode).toBe(401);
      const bad = await http.inject({ method: 'POST', url: '/api/v1/billing/users', headers: { ...headers, 'content-type': 'application/json' }, payload: '{not json' });
      expect(bad.statusCode).toBe(401);
    }
  });

  it('small routes take small bodies: 413 past the limit, even with the token', async () => {
    const res = await http.inject({
      method: 'POST',
      url: '/api/v1/billing/users',
      headers: { ...auth, 'content-type': 'application/json' },
      payload: JSON.stringify({ external_id: 'x'.repeat(200 * 1024) }),
    });
    expect(res.statusCode).toBe(413);
  });

  it('only the admin token mints sessions, so revoking a session leaves no child alive', async () => {
    const parent = (await http.inject({ method: 'POST', url: '/api/v1/sessions', headers: auth })).json();
    expect(parent.token).toBeTruthy();
    const child = await http.inject({ method: 'POST', url: '/api/v1/sessions', headers: { authorization: `Bearer ${parent.token}` } });
    expect(child.statusCode).toBe(403);
    expect((await http.inject({ method: 'DELETE', url: '/api/v1/sessions/current', headers: { authorization: `Bearer ${parent.token}` } })).statusCode).toBe(204);
    expect((await http.inject({ url: '/api/v1/jobs', headers: { authorization: `Bearer ${parent.token}` } })).statusCode).toBe(401);
    expect(Number((await sql.query(`SELECT count(*) AS n FROM admin_sessions`)).rows[0].n)).toBe(0);
  });

  it('a usage cleanup task covers at most 31 days (max_range_days)', async () => {
    const post = (from: string, to: string) => http.inject({ method: 'POST', url: '/api/v1/usage/cleanup-tasks', headers: auth, payload: { from, to } });
    const wide = await post('1970-01-01T00:00:00Z', '9999-01-01T00:00:00Z');
    expect(wide.statusCode).toBe(400);
    expect(wide.json().error.fields[0]).toMatchObject({ field: 'to', message: expect.stringMatching(/31 days/) });
    expect((await post('2026-01-01T00:00:00Z', '2026-02-01T00:00:00Z')).statusCode).toBe(201);
  });
});

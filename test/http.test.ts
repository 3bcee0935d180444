import { applyConnectionCap, ServerIngress } from '../src/http/connection-limits.js';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { JOBS } from '../src/app/registry.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { waitFor } from './helpers/wait.js';

const TOKEN = 'test-admin-token-0123456789';

describe('HTTP API (embedded runtime)', () => {
  let rt: Runtime;
  let http: FastifyInstance;
  const auth = { authorization: `Bearer ${TOKEN}` };
  beforeAll(async () => {
    const dir = embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-http-')));
    const config = loadConfig({
      env: {
        RELAY_JOBS_DATA_DIR: dir,
        RELAY_JOBS_ADMIN_TOKEN: TOKEN,
        RELAY_JOBS__JOBS__CANARY__SLEEP: '400ms',
        RELAY_JOBS__SHUTDOWN__GRACE: '2s',
        RELAY_JOBS__HTTP__HEADERS_TIMEOUT: '1s',
        RELAY_JOBS__HTTP__REQUEST_TIMEOUT: '2s',
        RELAY_JOBS__HTTP__MAX_CONNECTIONS: '20',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    rt.start(new ServerIngress(http));
  });
  afterAll(async () => {
    await rt.shutdown();
  });

  it('healthz and readyz answer without a token; metrics are Prometheus text', async () => {
    expect((await http.inject('/healthz')).json()).toMatchObject({ status: 'ok', mode: 'embedded' });
    const ready = await http.inject('/readyz');
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toEqual({ ready: true, checks: { shutdown: 'ok', database: 'ok' } });
    const m = await http.inject('/metrics');
    expect(m.headers['content-type']).toMatch(/text\/plain/);
    expect(m.body).toMatch(/# TYPE relay_jobs_rounds_total counter/);
  });

  it('the admin API needs the token and says so', async () => {
    const none = await http.inject('/api/v1/jobs');
    expect(none.statusCode).toBe(401);
    expect(none.json().error.message).toMatch(/Authorization: Bearer/);
    expect((await http.inject({ url: '/api/v1/jobs', headers: { authorization: 'Bearer wrong' } })).statusCode).toBe(401);
    // A token without the Bearer word is not "missing": the answer says what form is expected.
    const bare = await http.inject({ url: '/api/v1/jobs', headers: { authorization: TOKEN } });
    expect(bare.statusCode).toBe(401);
    expect(bare.json().error.message).toMatch(/must be "Bearer <token>"/);
    expect(bare.json().error.message).not.toMatch(/missing/);
  });

  it("unknown /api/v1 routes: 401 without a token, 404 after auth; API answers are no-store; Fastify's own errors in the one shape", async () => {
    const anon = await http.inject({ url: '/api/v1/no-such-thing' });
    expect(anon.statusCode).toBe(401);
    expect(anon.json().error.code).toBe('unauthorized');
    expect(anon.headers['cache-control']).toBe('no-store');
    const authed = await http.inject({ url: '/api/v1/no-such-thing', headers: auth });
    expect(authed.statusCode).toBe(404);
    expect(authed.json()).toEqual({ error: { code: 'not_found', message: 'no route GET /api/v1/no-such-thing' } });
    expect((await http.inject({ url: '/api/v1/jobs', headers: auth })).headers['cache-control']).toBe('no-store');
    expect((await http.inject({ method: 'POST', url: '/api/v1/sessions' })).headers['cache-control']).toBe('no-store');
    const badUrl = await http.inject({ url: '/api/v1/jobs/%E0%A4%A', headers: auth });
    expect(badUrl.statusCode).toBe(400);
    expect(badUrl.json()).toEqual({ error: { code: 'bad_request', message: 'the URL is not valid (bad percent-encoding)' } });
    const badJson = await http.inject({ method: 'POST', url: '/api/v1/billing/users', headers: { ...auth, 'content-type': 'application/json' }, payload: '{"a":' });
    expect(badJson.statusCode).toBe(400);
    expect(Object.keys(badJson.json())).toEqual(['error']);
    expect(badJson.json().error.code).toBe('bad_request');
    const big = await http.inject({
      method: 'POST',
      url: '/api/v1/billing/users',
      headers: { ...auth, 'content-type': 'application/json' },
      payload: JSON.stringify({ external_id: 'x'.repeat(100_000) }),
    });
    expect(big.statusCode).toBe(413);
    expect(big.json().error.code).toBe('too_large');
  });

  it('slow clients on real sockets: a half-sent request gets 408 in the one shape and is closed; connections past the cap are closed on arrival', async () => {
    await http.listen({ port: 0, host: '127.0.0.1' });
    applyConnectionCap(http, rt.config);
    const port = (http.server.address() as { port: number }).port;
    const open = (text: string) =>
      new Promise<{ data: () => string; closed: Promise<void>; end: () => void }>((resolve) => {
        let data = '';
        const s = connect(port, '127.0.0.1', () => {
          s.write(text);
          resolve({ data: () => data, closed, end: () => s.destroy() });
        });
        const closed = new Promise<void>((r) => s.on('close', () => r()));
        s.on('data', (d) => (data += d));
        s.on('error', () => undefined);
      });
    const body = await open(`POST /api/v1/billing/users HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{"a":`);
    const headers = await open('GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    // http.request_timeout is 2 s and http.headers_timeout 1 s here; Node checks them on a timer, so wait for the close, not for a time.
    await Promise.all([body.closed, headers.closed]);
    for (const c of [body, headers]) {
      expect(c.data()).toMatch(/^HTTP\/1\.1 408/);
      expect(JSON.parse(c.data().slice(c.data().indexOf('\r\n\r\n') + 4))).toEqual({ error: { code: 'timeout', message: expect.stringMatching(/http\.request_timeout/) } });
    }
    const idle = await Promise.all(Array.from({ length: 30 }, () => open('')));
    // http.max_connections is 20: the ones past it are closed at once.
    for (;;) {
      const closed = await Promise.all(idle.map((c) => Promise.race([c.closed.then(() => 1), new Promise<number>((r) => setTimeout(() => r(0), 10))])));
      if (closed.reduce((a, b) => a + b, 0) >= 10) break;
    }
    for (const c of idle) c.end();
    await Promise.all(idle.map((c) => c.closed));
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
  });

  it('POST /sql runs one read-only statement; writes and several statements are refused', async () => {
    const sql = (query: string) => http.inject({ method: 'POST', url: '/api/v1/sql', headers: auth, payload: { query } });
    const ok = await sql(`SELECT count(*)::int AS n FROM job_runs WHERE job_name = 'canary';`);
    expect(ok.statusCode, ok.body).toBe(200);
    expect(ok.json()).toMatchObject({ columns: ['n'], rows: [{ n: expect.any(Number) }], truncated: false });
    const write = await sql(`DELETE FROM job_runs`);
    expect(write.statusCode).toBe(400);
    expect(write.json().error.message).toMatch(/DELETE is refused: the console is read-only/);
    expect((await sql('SELECT 1; DELETE FROM job_runs')).json().error.message).toMatch(/one SQL statement/);
    expect((await http.inject({ method: 'POST', url: '/api/v1/sql', payload: { query: 'SELECT 1' } })).statusCode).toBe(401);
  });

  it('lists jobs with schedule, health and last run', async () => {
    const res = await http.inject({ url: '/api/v1/jobs', headers: auth });
    expect(res.statusCode).toBe(200);
    const jobs = res.json().jobs as Array<Record<string, unknown>>;
    // Every job in the registry, in its order (the registry is the one list).
    expect(jobs.map((j) => j.name)).toEqual(JOBS.map((j) => j.name));
    expect(jobs.map((j) => j.name)).toContain('token_refresh');
    expect(jobs.find((j) => j.name === 'canary')).toMatchObject({ enabled: false, health: 'disabled', scope: 'cluster' });
    expect(jobs.find((j) => j.name === 'session_cleanup')).toMatchObject({ enabled: true, schedule: { every: '1h' } });
  });

  it('runs a job on demand: 202 with the run id, 409 while it is running, the record when done', async () => {
    const first = await http.inject({ method: 'POST', url: '/api/v1/jobs/canary/run', headers: auth });
    expect(first.statusCode).toBe(202);
    const { run_id, poll } = first.json();
    const busy = await http.inject({ method: 'POST', url: '/api/v1/jobs/canary/run', headers: auth });
    expect(busy.statusCode).toBe(409);
    expect(busy.json().error.message).toMatch(/lease held by embedded|lock \(memory\) held/);
    const run = await waitFor(
      async () => {
        const r = (await http.inject({ url: poll, headers: auth })).json().run as Record<string, unknown>;
        return r.status === 'ok' ? r : null;
      },
      { what: 'the manual canary run finished', timeoutMs: 30_000 }, // a 400 ms round; PGlite runs in this loaded worker
    );
    expect(run).toMatchObject({ id: run_id, status: 'ok', items: 1, trigger: 'manual' });
    expect((await http.inject({ method: 'POST', url: '/api/v1/jobs/nope/run', headers: auth })).statusCode).toBe(404);
    const detail = (await http.inject({ url: '/api/v1/jobs/canary', headers: auth })).json();
    expect(detail.runs.some((r: { status: string }) => r.status === 'skipped_not_leader')).toBe(true);
  });

  it('admin sessions: create, use, revoke; session_cleanup deletes expired ones', async () => {
    const created = await http.inject({ method: 'POST', url: '/api/v1/sessions', headers: auth });
    expect(created.statusCode).toBe(201);
    const { token } = created.json();
    const bySession = { authorization: `Bearer ${token}` };
    expect((await http.inject({ url: '/api/v1/instances', headers: bySession })).json().instances[0]).toMatchObject({ instance_id: 'embedded', alive: true });
    expect((await http.inject({ method: 'DELETE', url: '/api/v1/sessions/current', headers: bySession })).statusCode).toBe(204);
    expect((await http.inject({ url: '/api/v1/jobs', headers: bySession })).statusCode).toBe(401);

    // Bound to the admin token: a rotation ends every session it minted (bearer and cookie alike).
    const before = rt.adminToken!;
    const keep = (await http.inject({ method: 'POST', url: '/api/v1/sessions', headers: auth })).json().token as string;
    const cookieLogin = await http.inject({ method: 'POST', url: '/api/v1/sessions', headers: auth, payload: { cookie: true } });
    const cookie = cookieLogin.cookies.map((c) => `${c.name}=${c.value}`).join('; ');
    expect((await http.inject({ url: '/api/v1/jobs', headers: { cookie } })).statusCode).toBe(200);
    expect((await http.inject({ url: '/api/v1/jobs', headers: { authorization: `Bearer ${keep}` } })).statusCode).toBe(200);
    rt.adminToken = 'a-rotated-admin-token-0123456789';
    expect((await http.inject({ url: '/api/v1/jobs', headers: { authorization: `Bearer ${keep}` } })).statusCode).toBe(401);
    expect((await http.inject({ url: '/api/v1/jobs', headers: { cookie } })).statusCode).toBe(401);
    expect((await http.inject({ url: '/api/v1/jobs', headers: auth })).statusCode).toBe(401);
    rt.adminToken = before;
    expect((await http.inject({ url: '/api/v1/jobs', headers: { authorization: `Bearer ${keep}` } })).statusCode).toBe(200);
    // Revoke-all ends every session at once; the admin token still works.
    const all = await http.inject({ method: 'POST', url: '/api/v1/sessions/revoke-all', headers: { authorization: `Bearer ${keep}` } });
    expect(all.json()).toEqual({ revoked: 2 });
    expect((await http.inject({ url: '/api/v1/jobs', headers: { authorization: `Bearer ${keep}` } })).statusCode).toBe(401);
    expect((await http.inject({ url: '/api/v1/jobs', headers: { cookie } })).statusCode).toBe(401);
    expect((await http.inject({ url: '/api/v1/jobs', headers: auth })).statusCode).toBe(200);

    for (let i = 0; i < 3; i++) await rt.sessions.create(60, before);
    // session_cleanup keeps its hourly schedule here, so a scheduled round may run (or hold the job)
    // meanwhile: the three are counted over every round from here on, and a refused runNow is asked again.
    const from = Number((await rt.db.query(`SELECT coalesce(max(id), 0) AS id FROM job_runs`)).rows[0]!.id);
    await rt.db.query(`UPDATE admin_sessions SET expires_at = now() - interval '1 second'`);
    await rt.sessions.create(60, before); // still valid
    const report = await waitFor(async () => ((r) => (r.ran ? r : null))(await rt.runNow('session_cleanup')), { what: 'a manual session_cleanup round', timeoutMs: 30_000 });
    expect(['ok', 'no_work']).toContain(report.ran && report.outcome.status); // no_work when a scheduled round got there first
    const cleaned = await rt.db.query(`SELECT sum(items)::int AS n FROM job_runs WHERE job_name = 'session_cleanup' AND id > $1 AND status IN ('ok', 'no_work')`, [from]);
    expect(cleaned.rows[0]!.n).toBe(3);
    const left = await rt.db.query('SELECT count(*)::int AS n FROM admin_sessions');
    expect(Number(left.rows[0]!.n)).toBe(1);
  });

  it('readiness is false from the moment shutdown begins', async () => {
    const done = rt.shutdown('test');
    expect(rt.isShuttingDown).toBe(true);
    await done;
    expect(await rt.metrics.registry.getSingleMetricAsString('relay_jobs_ready')).toMatch(/relay_jobs_ready 0/);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';

const ADMIN = 'revoke-streams-admin-token-0123456789';

interface OpenStream {
  /** When the service ended the stream (performance.now()), once it has. */
  endedAt: number | null;
  text: string;
  destroy(): void;
}

/** Opens `GET /api/v1/events` with a bearer token and resolves once the stream said hello. */
function openStream(port: number, token: string): Promise<OpenStream> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/api/v1/events', headers: { authorization: `Bearer ${token}` } }, (res: IncomingMessage) => {
      if (res.statusCode !== 200) return reject(new Error(`stream answered ${res.statusCode}`));
      const s: OpenStream = { endedAt: null, text: '', destroy: () => req.destroy() };
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        s.text += chunk;
        if (s.text.includes('event: hello')) resolve(s);
      });
      res.on('end', () => (s.endedAt ??= performance.now()));
      res.on('close', () => (s.endedAt ??= performance.now()));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The reason of the stream's `bye` event (what ended it), or null if it ended without one. */
function byeReason(s: OpenStream): string | null {
  const m = /event: bye\ndata: (.*)\n/.exec(s.text);
  return m ? (JSON.parse(m[1]!) as { reason: string }).reason : null;
}

/**
 * Issue 51, point 4: revoking a session ends its event streams at once on the replica that
 * answered and within about a second on another. Two HTTP servers over one database stand for two
 * replicas: each has its own stream hub, so a revoke answered by A reaches B's streams only
 * through the shared table (B's 250 ms session re-check), exactly as between two processes.
 * Before: B re-checked every 30 s. Each stream's `bye` reason names what ended it.
 */
describe('revoking a session ends its event streams on every replica', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let rt: Runtime;
  let a: FastifyInstance;
  let b: FastifyInstance;
  let portA = 0;
  let portB = 0;
  const prefix = uniqueName('rjrev');
  const streams: OpenStream[] = [];

  const call = async (app: FastifyInstance, method: 'POST' | 'DELETE', url: string, token: string) =>
    app.inject({ method, url, headers: { authorization: `Bearer ${token}` }, ...(method === 'POST' ? { payload: {} } : {}) });
  const newSession = async () => {
    const res = await call(a, 'POST', '/api/v1/sessions', ADMIN);
    expect(res.statusCode, res.body).toBe(201);
    return res.json().token as string;
  };
  const open = async (port: number, token: string) => {
    const s = await openStream(port, token);
    streams.push(s);
    return s;
  };
  /** Waits (polling) for the stream to end and returns how long after `t0` it did. */
  const endedWithin = async (s: OpenStream, t0: number) => {
    await waitFor(() => s.endedAt !== null, { what: 'the event stream to end', timeoutMs: 15_000, intervalMs: 10 });
    return s.endedAt! - t0;
  };
  /**
   * B's streams end at its session re-check (every 250 ms, plus one query); the re-check it replaced
   * ran every 30 s. 5 s sits between the two, with room for a loaded machine.
   */
  const RECHECK_BOUND_MS = 5000;

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'rev-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    a = buildHttpServer(rt);
    b = buildHttpServer(rt);
    await a.listen({ host: '127.0.0.1', port: 0 });
    await b.listen({ host: '127.0.0.1', port: 0 });
    portA = (a.server.address() as AddressInfo).port;
    portB = (b.server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    for (const s of streams) s.destroy();
    await a?.close();
    await b?.close();
    await rt?.shutdown();
    await db?.drop();
    await dropRedisPrefix(prefix);
  });

  it('DELETE /sessions/current on replica A ends that session’s streams on A at once and on B at its next re-check', async () => {
    const token = await newSession();
    const other = await newSession();
    const onA = await open(portA, token);
    const onB = await open(portB, token);
    const bystander = await open(portB, other);
    const t0 = performance.now();
    expect((await call(a, 'DELETE', '/api/v1/sessions/current', token)).statusCode).toBe(204);
    const msA = await endedWithin(onA, t0);
    const msB = await endedWithin(onB, t0);
    // A ended it with the sign-out itself (its re-check would say "the session ended"); B through the shared table.
    expect(byeReason(onA)).toBe('signed out');
    expect(byeReason(onB)).toBe('the session ended');
    expect(msB, `B's stream ended after ${Math.round(msB)} ms`).toBeLessThan(RECHECK_BOUND_MS);
    console.log(`session-revoke-streams: sign-out ended the stream on A after ${Math.round(msA)} ms, on B after ${Math.round(msB)} ms`);
    // Another session's stream is untouched: still open after B's next re-checks.
    await waitFor(() => performance.now() - t0 > 600, { what: 'a few of B’s session re-checks', intervalMs: 50 });
    expect(bystander.endedAt).toBeNull();
  });

  it('POST /sessions/revoke-all on A ends every session’s streams on A at once and on B at its next re-check; a stream on the admin token goes on', async () => {
    const s1 = await newSession();
    const s2 = await newSession();
    const onA = await open(portA, s1);
    const onB = await open(portB, s2);
    const admin = await open(portB, ADMIN);
    const t0 = performance.now();
    const res = await call(a, 'POST', '/api/v1/sessions/revoke-all', ADMIN);
    expect(res.statusCode, res.body).toBe(200);
    const msA = await endedWithin(onA, t0);
    const msB = await endedWithin(onB, t0);
    expect(byeReason(onA)).toBe('every session was revoked');
    expect(byeReason(onB)).toBe('the session ended');
    expect(msB, `B's stream ended after ${Math.round(msB)} ms`).toBeLessThan(RECHECK_BOUND_MS);
    expect(admin.endedAt).toBeNull();
    console.log(`session-revoke-streams: revoke-all ended the stream on A after ${Math.round(msA)} ms, on B after ${Math.round(msB)} ms`);
  });

  it('admin token rotation is a restart with the new token: closing a replica ends its streams as it closes', async () => {
    // The admin token is read once at start (RELAY_JOBS_ADMIN_TOKEN or data/admin-token); a replica
    // restarted with a new one ends its streams as its server closes, and the old token's sessions
    // no longer verify anywhere the new token runs (test/http.test.ts, "rotation").
    const s = await open(portB, await newSession());
    const admin = await open(portB, ADMIN);
    const t0 = performance.now();
    const closing = b.close();
    const ms = Math.max(await endedWithin(s, t0), await endedWithin(admin, t0));
    await closing;
    console.log(`session-revoke-streams: closing the server ended its streams after ${Math.round(ms)} ms`);
    // Ended by the server's close (preClose), not cut: without it, close() would wait for the open streams.
    expect(byeReason(s)).toBe('the server is shutting down');
    expect(byeReason(admin)).toBe('the server is shutting down');
  });
});

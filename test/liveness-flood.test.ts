import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { applyConnectionCap, unservedPerAddress } from '../src/http/connection-limits.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';

const FLOOD = 1000;
/** How long a probe may take: a third of the headers timeout set below (a loaded two-core machine answers in about 1 s). */
const PROBE_WAIT_MS = 20_000;

interface Silent {
  socket: Socket;
  closed: boolean;
}

/** A TCP connection that never sends a byte; resolves once connected (or once the service closed it). */
function silent(port: number): Promise<Silent> {
  return new Promise((resolve) => {
    const c: Silent = { socket: connect(port, '127.0.0.1'), closed: false };
    c.socket.on('connect', () => resolve(c));
    c.socket.on('error', () => undefined);
    c.socket.on('close', () => {
      c.closed = true;
      resolve(c);
    });
  });
}

/**
 * Issue 51, point 7: 1,000 silent connections from one address (the default `http.max_connections`)
 * no longer starve the liveness probe. Before, they filled the cap and `/healthz` was reset on
 * arrival until `http.headers_timeout` freed them (about 10 s). Now an address holds at most
 * `unservedPerAddress` connections that have not sent a request, its oldest closed to make room,
 * and a full server closes its oldest unserved connection rather than the newcomer.
 */
describe('liveness under a silent-connection flood from one address', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let rt: Runtime;
  let http: FastifyInstance;
  let port = 0;
  const prefix = uniqueName('rjflood');
  const flood: Silent[] = [];

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'flood-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: 'flood-admin-token-0123456789',
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        // Silent connections are freed by the headers timeout at the latest: a minute here, so a probe
        // answered within PROBE_WAIT_MS was answered beside them, not after the timeout freed them.
        RELAY_JOBS__HTTP__HEADERS_TIMEOUT: '60s',
        RELAY_JOBS__HTTP__REQUEST_TIMEOUT: '60s',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    await http.listen({ host: '127.0.0.1', port: 0 });
    applyConnectionCap(http, rt.config);
    port = (http.server.address() as AddressInfo).port;
    // Warm up before the timed probes: the first fetch loads Node's HTTP client and the first request
    // sets up the route's contract checks, hundreds of ms on a loaded machine that are not the flood's.
    // `Connection: close`, so the timed probes still arrive on new, unserved connections.
    const warm = await fetch(`http://127.0.0.1:${port}/healthz`, { headers: { connection: 'close' } });
    expect(warm.status).toBe(200);
    await warm.text();
  });
  afterAll(async () => {
    for (const c of flood) c.socket.destroy();
    await http?.close();
    await rt?.shutdown();
    await db?.drop();
    await dropRedisPrefix(prefix);
  });

  it(`/healthz answers with ${FLOOD} silent connections open from 127.0.0.1, without waiting for the headers timeout to free them`, async () => {
    expect(rt.config.http.max_connections).toBe(FLOOD);
    for (let i = 0; i < FLOOD; i += 100) flood.push(...(await Promise.all(Array.from({ length: 100 }, () => silent(port)))));
    const t0 = performance.now();
    const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(PROBE_WAIT_MS) });
    const ms = performance.now() - t0;
    expect(res.status).toBe(200);
    // The service closed the oldest of them past the per-address cap; the rest stay open, silent.
    const cap = unservedPerAddress(rt.config.http.max_connections);
    await waitFor(() => flood.filter((c) => !c.closed).length <= cap, { what: () => `at most ${cap} silent connections left open (${flood.filter((c) => !c.closed).length} open)` });
    const stillOpen = flood.filter((c) => !c.closed).length;
    // (The probe's own connection arrived unserved from the same address and closed one more of them.)
    expect(stillOpen).toBeGreaterThanOrEqual(cap - 1);
    console.log(`liveness-flood: /healthz answered in ${Math.round(ms)} ms with ${FLOOD} silent connections opened from one address (${stillOpen} left open)`);
    // And again while the flood goes on: another 200 silent connections, then the probe.
    for (let i = 0; i < 2; i++) flood.push(...(await Promise.all(Array.from({ length: 100 }, () => silent(port)))));
    const t1 = performance.now();
    expect((await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(PROBE_WAIT_MS) })).status).toBe(200);
    console.log(`liveness-flood: /healthz answered in ${Math.round(performance.now() - t1)} ms after 200 more`);
  });

  it('a request in progress is never the one closed: a full server closes its oldest unserved connection instead', async () => {
    // The flood of the test above is still open (cap unserved ones); a served keep-alive connection survives more silent ones.
    const agentRes = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(agentRes.status).toBe(200);
    for (let i = 0; i < 3; i++) flood.push(...(await Promise.all(Array.from({ length: 100 }, () => silent(port)))));
    expect((await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(PROBE_WAIT_MS) })).status).toBe(200);
  });
});

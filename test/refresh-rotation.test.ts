import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { startCluster } from './helpers/cluster.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { SteppedClock } from './helpers/stepped-clock.js';
import { SecretBox } from '../src/store/secret-box.js';

const ADMIN = 'rotation-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };

/** An account's stored refresh token and status, read straight from PostgreSQL. */
async function stored(url: string, id: number): Promise<{ refreshToken: string | null; status: string; leases: number }> {
  const sql = new pg.Client({ connectionString: url });
  await sql.connect();
  try {
    const { rows } = await sql.query(`SELECT status, credentials_sealed FROM accounts WHERE id = $1`, [id]);
    const leases = (await sql.query(`SELECT count(*)::int AS n FROM account_refresh_leases`)).rows[0].n as number;
    const creds = JSON.parse(SecretBox.fromBase64(TEST_MASTER_KEY).open(rows[0].credentials_sealed, 'account-credentials'));
    return { refreshToken: creds.refresh_token ?? null, status: rows[0].status, leases };
  } finally {
    await sql.end();
  }
}

/**
 * A rotated refresh token, once the provider has sent it, is never lost (issue 10). The fixture
 * rotates first (the presented token is dead from then on) and replies late, like a slow
 * standards-compliant provider: the client must still be listening when the reply comes.
 */
describe('rotated refresh tokens survive slow replies and a forced exit', () => {
  let oauth: FakeOAuthServer;
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  const prefix = uniqueName('rjrot');
  /** The fake provider, and no scheduled refresh: each test asks for its refreshes. */
  const providerEnv = () => ({
    RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'rot-client',
    RELAY_JOBS__JOBS__TOKEN_REFRESH__ENABLED: 'false',
  });
  beforeAll(async () => {
    oauth = await FakeOAuthServer.start({ clientId: 'rot-client' });
    db = await freshDatabase();
  });
  afterAll(async () => {
    await oauth.close();
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  it('a reply slower than auth.refresh_request_timeout is awaited and stored, not aborted and retried with the consumed token', async () => {
    const rt = await Runtime.create(
      loadConfig({
        env: {
          ...providerEnv(),
          DATABASE_URL: db.url,
          REDIS_URL,
          RELAY_JOBS_ENV: 'test',
          RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
          RELAY_JOBS_INSTANCE_ID: 'rot-1',
          RELAY_JOBS_ADMIN_TOKEN: ADMIN,
          RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
          RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
          RELAY_JOBS__DATABASE__POOL_SIZE: '4',
          RELAY_JOBS__AUTH__REFRESH_REQUEST_TIMEOUT: '200ms',
        },
      }),
      { logger: silentLogger() },
    );
    const http: FastifyInstance = buildHttpServer(rt);
    try {
      const created = await http.inject({ method: 'POST', url: '/api/v1/accounts', headers: auth, payload: { platform: 'openai', name: 'slow-1', credentials: oauth.issue('slow-1') } });
      expect(created.statusCode, created.body).toBe(201);
      const id = created.json().id as number;
      oauth.lateReplyMs = 1500; // 7.5 × the request timeout
      const first = await http.inject({ method: 'POST', url: `/api/v1/accounts/${id}/refresh`, headers: auth });
      oauth.lateReplyMs = 0;
      expect(first.json()).toMatchObject({ result: 'refreshed' });
      expect(oauth.lateSent).toBe(1);
      // The next refresh presents the rotated token: the provider never sees a reused one.
      expect((await http.inject({ method: 'POST', url: `/api/v1/accounts/${id}/refresh`, headers: auth })).json()).toMatchObject({ result: 'refreshed' });
      expect(oauth.reuses).toBe(0);
      const a = await rt.services.accounts.openSecrets(id);
      expect(a?.status).toBe('active');
      expect(a?.credentials.refresh_token).toBe(oauth.liveTokenOf('slow-1'));
    } finally {
      await rt.shutdown();
      await http.close();
    }
  });

  it('a second SIGTERM waits for the refresh call already sent and stores the rotated token before exiting 130', async () => {
    const c = await startCluster({ replicas: ['rot-2'], env: providerEnv() });
    const replica = c.replica(0);
    try {
      const created = await c.api(replica, '/accounts', { body: { platform: 'openai', name: 'exit-1', credentials: oauth.issue('exit-1') } });
      expect(created.status).toBe(201);
      const id = (await created.json()).id as number;
      oauth.lateReplyMs = 2000;
      const sentBefore = oauth.requests.length;
      const refresh = c.api(replica, `/accounts/${id}/refresh`, { body: {} }).catch(() => null);
      // Wait until the provider has the request (and has rotated the token), then force the exit.
      await waitFor(() => oauth.requests.length > sentBefore, { what: 'the refresh request to reach the provider' });
      expect(oauth.requests.length).toBe(sentBefore + 1);
      replica.proc.proc.kill('SIGTERM');
      await replica.proc.waitForLine(/shutdown: readiness false/);
      replica.proc.proc.kill('SIGTERM');
      expect(await replica.proc.exitedWithin()).toBe(130);
      await refresh;
      oauth.lateReplyMs = 0;
      expect(replica.lines.some((l) => /second signal: exiting without a clean drain once the refresh calls already sent are stored/.test(l) && l.includes(`[${id}]`))).toBe(true);
      expect(oauth.lateSent).toBeGreaterThanOrEqual(1);
      const after = await stored(c.databaseUrl!, id);
      expect(after.refreshToken).toBe(oauth.liveTokenOf('exit-1'));
      expect(after.status).toBe('active');
      expect(after.leases).toBe(0);
    } finally {
      oauth.lateReplyMs = 0;
      await c.stop();
    }
  }, 60_000);
});

/** Sub2API's temporary-unschedulable state after exhausted retries (issue 10, seed deviation). */
describe('exhausted refresh retries', () => {
  it('make the account temporarily unschedulable until its recovery attempt; a later success clears it', async () => {
    const oauth = await FakeOAuthServer.start({ clientId: 'ex-client' });
    const db = await freshDatabase();
    const prefix = uniqueName('rjexh');
    const rt = await Runtime.create(
      loadConfig({
        env: {
          DATABASE_URL: db.url,
          REDIS_URL,
          RELAY_JOBS_INSTANCE_ID: 'ex-1',
          RELAY_JOBS_ENV: 'test',
          RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
          RELAY_JOBS_ADMIN_TOKEN: ADMIN,
          RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
          RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
          RELAY_JOBS__DATABASE__POOL_SIZE: '4',
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'ex-client',
          RELAY_JOBS__AUTH__REFRESH_MAX_ATTEMPTS: '2',
        },
      }),
      { logger: silentLogger() },
    );
    const http = buildHttpServer(rt);
    try {
      const a = (await http.inject({ method: 'POST', url: '/api/v1/accounts', headers: auth, payload: { platform: 'openai', name: 'ex-1', credentials: oauth.issue('ex-1') } })).json();
      const refresh = async () => (await http.inject({ method: 'POST', url: `/api/v1/accounts/${a.id}/refresh`, headers: auth })).json();
      oauth.fail('unknown_400', 2);
      expect((await refresh()).account.temp_unschedulable_until).toBeNull(); // first failure: a retry, still schedulable
      expect((await refresh()).result).toBe('transient');
      // The mark is written right after the outcome; wait for it.
      const view = await waitFor(
        async () => {
          const v = (await http.inject({ url: `/api/v1/accounts/${a.id}`, headers: auth })).json();
          return v.temp_unschedulable_until ? v : null;
        },
        { what: 'the temp_unschedulable mark', timeoutMs: 5000 },
      );
      expect(Date.parse(view.temp_unschedulable_until) - Date.now()).toBeGreaterThan(9 * 60_000);
      expect(view.temp_unschedulable_reason).toMatch(/^refresh_failing: unrecognized_error/);
      const ok = await refresh();
      expect(ok.result).toBe('refreshed');
      expect(ok.account.temp_unschedulable_until).toBeNull();
    } finally {
      await rt.shutdown();
      await http.close();
      await oauth.close();
      await db.drop();
      await dropRedisPrefix(prefix);
    }
  });
});

/** Sub2API's per-platform breaker (issue 10, seed deviation). */
describe('per-platform refresh breaker', () => {
  it('opens after N consecutive provider failures (or at once on invalid_client) and reschedules instead of calling', async () => {
    const oauth = await FakeOAuthServer.start({ clientId: 'br-client' });
    const db = await freshDatabase();
    const prefix = uniqueName('rjbrk');
    // The breaker's open period runs on the runtime's clock: the test steps past it instead of sleeping through it.
    const clock = new SteppedClock();
    const rt = await Runtime.create(
      loadConfig({
        env: {
          DATABASE_URL: db.url,
          REDIS_URL,
          RELAY_JOBS_INSTANCE_ID: 'br-1',
          RELAY_JOBS_ENV: 'test',
          RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
          RELAY_JOBS_ADMIN_TOKEN: ADMIN,
          RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
          RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
          RELAY_JOBS__DATABASE__POOL_SIZE: '4',
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'br-client',
          RELAY_JOBS__OAUTH__PROVIDERS__ACME__TOKEN_URL: oauth.tokenUrl,
          RELAY_JOBS__OAUTH__PROVIDERS__ACME__CLIENT_ID: 'wrong-client',
          RELAY_JOBS__AUTH__REFRESH_BREAKER_THRESHOLD: '2',
          RELAY_JOBS__AUTH__REFRESH_BREAKER_OPEN: '2s',
        },
      }),
      { logger: silentLogger(), clock },
    );
    const http = buildHttpServer(rt);
    const make = async (platform: string, name: string) =>
      (await http.inject({ method: 'POST', url: '/api/v1/accounts', headers: auth, payload: { platform, name, credentials: oauth.issue(name) } })).json().id as number;
    const refresh = async (id: number) => (await http.inject({ method: 'POST', url: `/api/v1/accounts/${id}/refresh`, headers: auth })).json();
    try {
      const ids = [await make('openai', 'br-1'), await make('openai', 'br-2'), await make('openai', 'br-3')];
      oauth.fail('500', 2);
      expect((await refresh(ids[0]!)).reason).toBe('server_error');
      expect((await refresh(ids[1]!)).reason).toBe('server_error');
      const calls = oauth.requests.length;
      const blocked = await refresh(ids[2]!);
      expect(blocked).toMatchObject({ result: 'transient', reason: 'breaker_open' });
      expect(oauth.requests.length).toBe(calls); // no provider call while open
      expect(blocked.account.refresh.consecutive_failures).toBe(0); // and no failure charged to the account
      clock.advance(2100); // past the open period (the breaker reads the runtime's clock)
      expect((await refresh(ids[2]!)).result).toBe('refreshed'); // the probe after the open period
      // invalid_client trips its platform at once, and only its platform.
      const acme = [await make('acme', 'ac-1'), await make('acme', 'ac-2')];
      expect((await refresh(acme[0]!)).result).toBe('config');
      expect((await refresh(acme[1]!)).reason).toBe('breaker_open');
      expect((await refresh(ids[0]!)).result).toBe('refreshed');
    } finally {
      await rt.shutdown();
      await http.close();
      await oauth.close();
      await db.drop();
      await dropRedisPrefix(prefix);
    }
  });
});

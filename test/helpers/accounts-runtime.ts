import { afterAll, beforeAll, expect } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { loadConfig } from '../../src/app/config-schema.js';
import { Runtime } from '../../src/app/runtime.js';
import { buildHttpServer } from '../../src/http/server.js';
import { ManualClock } from '../../src/time/clock.js';
import { FakeOAuthServer } from '../fixtures/oauth-server.js';
import { captureLogs } from './log-capture.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './services.js';

/**
 * Shared by the accounts-*.test.ts files: one runtime per file on real PostgreSQL (a fresh
 * database) and Redis, against a real OAuth server on loopback (`openai` with the right client
 * id, `acme` with a wrong one). The runtime is never started and its clock is manual, started at
 * the real time (the fake server's JWTs carry real `exp`), so due times, backoff and cooldowns are
 * exact; its logs are captured (searched for leaked tokens).
 */

export const ADMIN = 'accounts-admin-token-0123456789';
export const auth = { authorization: `Bearer ${ADMIN}` };

export interface AccountsRuntime {
  sql: pg.Client;
  oauth: FakeOAuthServer;
  rt: Runtime;
  http: FastifyInstance;
  clock: ManualClock;
  logs: ReturnType<typeof captureLogs>;
  /** The Redis key prefix of this file's runtime. */
  prefix: string;
}

/** Every accounts file ends with this over its captured logs: no refresh token or JWT the fake OAuth server issued appears in them. */
export function expectNoTokenLogged(text: string): void {
  expect(text.length).toBeGreaterThan(0);
  expect(text).not.toMatch(/rt_[0-9a-f]{24}/);
  expect(text).not.toMatch(/eyJ[A-Za-z0-9_-]{10,}\.eyJ/);
}

export type CreatedAccount = { id: number; token_version: number; token_expires_at: string | null; creds: { access_token: string; refresh_token: string }; [k: string]: unknown };

/**
 * Registers, in the calling describe, a beforeAll that starts the runtime and an afterAll that
 * stops it and drops its database and keys. `started()` is the running runtime (from the
 * describe's own beforeAll on); the account helpers returned read it when called. `random` is
 * the runtime's jitter source.
 */
export function accountsRuntime(random: () => number = () => 0.5) {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let h: AccountsRuntime | undefined;
  const prefix = uniqueName('rjacc');

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    const sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const oauth = await FakeOAuthServer.start();
    const clock = new ManualClock(Date.now());
    const logs = captureLogs('acc');
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'acc-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'test-client',
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__MAX_PER_SECOND: '1000',
        RELAY_JOBS__OAUTH__PROVIDERS__ACME__TOKEN_URL: oauth.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__ACME__CLIENT_ID: 'wrong-client',
        RELAY_JOBS__AUTH__REFRESH_REQUEST_TIMEOUT: '500ms',
        RELAY_JOBS__AUTH__REFRESH_REPLY_TIMEOUT: '1s',
        // The classification cases fail one provider call after another on purpose: keep the platform breaker out of it.
        RELAY_JOBS__AUTH__REFRESH_BREAKER_THRESHOLD: '1000',
        RELAY_JOBS__AUTH__HOT_PATH_WAIT: '2s',
      },
    });
    const rt = await Runtime.create(config, { clock, random, logger: logs.logger });
    // The runtime is never started, so no instance heartbeat ever answers with the refresh member
    // list, and the first `sync()` would wait out its 11 s (2 × the 5 s heartbeat + 1 s) for it.
    // Give it the list a beat of this lone replica would bring: itself. It owns every account,
    // exactly as it does while the list is unknown, so no schedule in the tests changes.
    rt.memberships.get('token_refresh').update(['acc-1']);
    h = { sql, oauth, rt, http: buildHttpServer(rt), clock, logs, prefix };
  });
  afterAll(async () => {
    await h?.rt.shutdown();
    await h?.http.close();
    await h?.oauth.close();
    await h?.sql.end();
    await db?.drop();
    await dropRedisPrefix(prefix);
  });

  const started = (): AccountsRuntime => {
    if (!h) throw new Error('the accounts runtime is not started: use it from a hook or a test');
    return h;
  };
  /** Issues credentials for `name` at the OAuth server and creates the account over the API (201 asserted). */
  async function createAccount(name: string, extra: Record<string, unknown> = {}, lifetimeSec = 3600): Promise<CreatedAccount> {
    const { oauth, http } = started();
    const creds = oauth.issue(name, lifetimeSec);
    const res = await http.inject({ method: 'POST', url: '/api/v1/accounts', headers: auth, payload: { platform: 'openai', name, credentials: creds, ...extra } });
    expect(res.statusCode, res.body).toBe(201);
    return { ...res.json(), creds } as CreatedAccount;
  }
  const get = async (id: number) => (await started().http.inject({ url: `/api/v1/accounts/${id}`, headers: auth })).json();
  const post = (url: string, payload?: unknown) => started().http.inject({ method: 'POST', url, headers: auth, payload: payload as object });
  return { started, createAccount, get, post };
}

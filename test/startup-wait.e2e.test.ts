import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { runCli, ServiceProcess } from './helpers/cli.js';
import { PgBouncer, hasPgbouncer } from './helpers/pgbouncer.js';
import { PrivatePostgres, hasPostgresServer } from './helpers/private-postgres.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freePort, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { isTransientConnectError } from '../src/store/pg-startup.js';
import { PgConnectFailure, PgDb } from '../src/store/pg-db.js';
import { settledWithin } from '../src/time/clock.js';

/**
 * Issue 53 (soak finding 4): a replica started while PostgreSQL behind PgBouncer was restarting
 * exited 2 with PgBouncer's "server login has been failing, try again later (server_login_retry)".
 * `start` now waits out a database that is not reachable yet (a log line per attempt) until
 * `database.startup_wait`; a wrong database still exits 2 at once. A real PgBouncer in front of a
 * PostgreSQL of the test's own, stopped and started by the test.
 */
describe.runIf(hasPgbouncer() && hasPostgresServer())('start-up waits for a database behind PgBouncer that is not up yet', () => {
  let server: PrivatePostgres;
  let bouncer: PgBouncer;
  const prefix = uniqueName('rjwait');

  beforeAll(async () => {
    server = await PrivatePostgres.start();
    // PgBouncer's default server_login_retry is 15 s; 2 s keeps the test short, the behaviour is the same.
    bouncer = await PgBouncer.start('session', { target: server.url, settings: { server_login_retry: '2' } });
  });
  afterAll(async () => {
    await bouncer?.stop();
    await server?.destroy();
    await dropRedisPrefix(prefix);
  });

  /** One connection through PgBouncer: what it answered. */
  async function through(database: string): Promise<string> {
    const c = new pg.Client({ connectionString: bouncer.url(database), connectionTimeoutMillis: 2000, query_timeout: 2000 });
    c.on('error', () => undefined);
    try {
      await c.connect();
      await c.query('SELECT 1');
      return 'ok';
    } catch (err) {
      return (err as Error).message;
    } finally {
      await c.end().catch(() => undefined);
    }
  }

  /** PostgreSQL stopped, and PgBouncer failing every client login fast (its server login failed), as in the soak. */
  async function downBehindBouncer(): Promise<void> {
    await server.stopServer('immediate').catch(() => undefined); // already stopped
    await waitFor(async () => /server_login_retry/.test(await through('postgres')), { what: 'PgBouncer answering server_login_retry' });
  }

  const env = (extra: Record<string, string>) => ({
    RELAY_JOBS_ENV: 'wait',
    RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
    RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
    REDIS_URL,
    RELAY_JOBS__DATABASE__CONNECT_TIMEOUT: '1s',
    RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: '1',
    ...extra,
  });
  const progress = (lines: string[]) => lines.filter((l) => l.includes('not reachable yet'));

  it('a wrong database name still exits 2 at once, naming it, without retrying', async () => {
    expect(await through('postgres')).toBe('ok');
    const r = await runCli(
      ['start'],
      env({ DATABASE_URL: bouncer.url('no_such_db'), RELAY_JOBS__DATABASE__STARTUP_WAIT: '10m', RELAY_JOBS_INSTANCE_ID: 'w1', RELAY_JOBS_HTTP_PORT: String(await freePort()) }),
      120_000, // far under the 10 min bound: retrying it would end this run, not a timing assertion
    );
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/cannot connect to PostgreSQL at postgres:\/\/\*\*\*@127\.0\.0\.1:\d+\/no_such_db \(DATABASE_URL\): database "no_such_db" does not exist; create it first/);
    expect(progress(r.stdout.split('\n'))).toEqual([]);
  });

  it('gives up after database.startup_wait with exit 2, the last reason and the bound, a log line per attempt', async () => {
    await downBehindBouncer();
    const r = await runCli(
      ['start'],
      env({ DATABASE_URL: bouncer.url('postgres'), RELAY_JOBS__DATABASE__STARTUP_WAIT: '3s', RELAY_JOBS_INSTANCE_ID: 'w2', RELAY_JOBS_HTTP_PORT: String(await freePort()) }),
      120_000,
    );
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(
      /cannot connect to PostgreSQL at postgres:\/\/\*\*\*@127\.0\.0\.1:\d+\/postgres \(DATABASE_URL\): server login has been failing, (try again later|cached error: [^()]+) \(server_login_retry\); still failing after \d+ attempts in [\d.]+ s \(database\.startup_wait 3 s\)/,
    );
    const lines = progress(r.stdout.split('\n'));
    expect(lines.length, r.stdout).toBeGreaterThanOrEqual(2);
    const first = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(first).toMatchObject({ level: 'warn', attempt: 1, source: 'DATABASE_URL', startup_wait_ms: 3000 });
    expect(first.url).toMatch(/^postgres:\/\/\*\*\*@127\.0\.0\.1:\d+\/postgres$/);
    // PgBouncer 1.18's words; 1.25 names the cached error: "server login has been failing, cached error: connect failed (server_login_retry)".
    expect(first.reason).toMatch(/^server login has been failing, (try again later|cached error: [^()]+) \(server_login_retry\)$/);
    expect(first.msg).toMatch(
      /^PostgreSQL at postgres:\/\/\*\*\*@127\.0\.0\.1:\d+\/postgres \(DATABASE_URL\) not reachable yet \(attempt 1\): server login has been failing.*; trying again in [\d.]+ s, for up to 3 s in all \(database\.startup_wait\)$/,
    );
  });

  it('a replica started during server_login_retry waits, and is ready once PostgreSQL is back (the soak: exit 2)', async () => {
    await downBehindBouncer();
    const port = await freePort();
    const replica = ServiceProcess.start(
      'w3',
      env({ DATABASE_URL: bouncer.url('postgres'), RELAY_JOBS__DATABASE__STARTUP_WAIT: '3m', RELAY_JOBS_INSTANCE_ID: 'w3', RELAY_JOBS_HTTP_PORT: String(port) }),
    );
    try {
      // Two attempts refused by PgBouncer: it is waiting, not exiting (waitForLine throws if it exited).
      await replica.waitForLine(/not reachable yet \(attempt 2\): server login has been failing/);
      await server.startServer();
      const ready = async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => null))?.status === 200;
      await waitFor(ready, { what: () => `w3 ready after PostgreSQL came back:\n${replica.lines.slice(-15).join('\n')}`, timeoutMs: 150_000, intervalMs: 200 });
      await replica.waitForLine(/relay-jobs started/);
    } finally {
      replica.proc.kill('SIGTERM');
      expect(await replica.exitedWithin(60_000), replica.lines.slice(-20).join('\n')).toBe(0);
    }
  });
});

describe.runIf(hasPgbouncer() && hasPostgresServer())('the first statement of a connect is bounded too', () => {
  let server: PrivatePostgres;
  let bouncer: PgBouncer;
  beforeAll(async () => {
    server = await PrivatePostgres.start();
    // query_wait_timeout 0: PgBouncer holds a statement waiting for a server for ever.
    bouncer = await PgBouncer.start('session', { target: server.url, settings: { query_wait_timeout: '0' } });
  });
  afterAll(async () => {
    await bouncer?.stop();
    await server?.destroy();
  });

  it('PostgreSQL just gone behind PgBouncer: the login is answered, SELECT 1 is not; connect fails within database.connect_timeout (transient)', async () => {
    await server.stopServer('immediate');
    const attempt = PgDb.connect({ url: bouncer.url('postgres'), poolSize: 1, connectTimeoutMs: 1000 }).then(
      (db) => db.close().then(() => null),
      (err: unknown) => err,
    );
    // Far above the 1 s bound: without it the statement waits on PgBouncer for ever.
    expect(await settledWithin(attempt, 60_000), 'connect did not end: its first statement is not bounded').toBe(true);
    const err = await attempt;
    expect(err).toBeInstanceOf(PgConnectFailure);
    expect((err as Error).message).toMatch(/cannot connect to PostgreSQL at postgres:\/\/\*\*\*@127\.0\.0\.1:\d+\/postgres \(DATABASE_URL\): no answer within 1 s \(database\.connect_timeout\)/);
    expect(isTransientConnectError(err)).toBe(true);
  });
});

describe('which connect failures start-up waits out', () => {
  const err = (code: string | undefined, message: string) => Object.assign(new Error(message), code ? { code } : {});
  it.each([
    ['refused', err('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:5432')],
    ['timed out', err('ETIMEDOUT', 'connect ETIMEDOUT 10.0.0.1:5432')],
    ['starting up', err('57P03', 'the database system is starting up')],
    ['shutting down', err('57P03', 'the database system is shutting down')],
    ['too many clients', err('53300', 'sorry, too many clients already')],
    ['pgbouncer server_login_retry', err('08P01', 'server login has been failing, try again later (server_login_retry)')],
    ['pgbouncer 1.25 server_login_retry', err('08P01', 'server login has been failing, cached error: connect failed (server_login_retry)')],
    ['pgbouncer client limit', err('08P01', 'no more connections allowed (max_client_conn)')],
    ['pg connect timeout', err(undefined, 'Connection terminated due to connection timeout')],
    ['first statement unanswered', err(undefined, 'Query read timeout')],
    ['dual-stack refused', Object.assign(new AggregateError([err('ECONNREFUSED', 'a'), err('ECONNREFUSED', 'b')], ''), { code: 'ECONNREFUSED' })],
  ])('%s: waited out', (_, e) => {
    expect(isTransientConnectError(e)).toBe(true);
    expect(isTransientConnectError(new PgConnectFailure('cannot connect …', e))).toBe(true);
  });
  it.each([
    ['bad password', err('28P01', 'password authentication failed for user "relay"')],
    ['no such role', err('28000', 'role "relay" does not exist')],
    ['unknown database', err('3D000', 'database "relay" does not exist')],
    ['unknown database through pgbouncer', err('08P01', 'database "relay" does not exist')],
    ['unknown host', err('ENOTFOUND', 'getaddrinfo ENOTFOUND db.example')],
    ['anything else', err(undefined, 'something unexpected')],
  ])('%s: fails at once', (_, e) => {
    expect(isTransientConnectError(new PgConnectFailure('cannot connect …', e))).toBe(false);
  });
});

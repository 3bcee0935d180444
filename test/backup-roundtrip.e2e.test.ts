import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { ServiceProcess, runCli } from './helpers/cli.js';
import { PrivateRedis, TEST_MASTER_KEY, freePort, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';

/**
 * The whole point of a backup: data from every area (accounts with sealed credentials, usage
 * and its rollups, billing, notifications) is backed up through the CLI, restored into a new
 * database, and a new relay-jobs process on it serves the same tokens, balances and dashboard.
 */
const TOKEN = 'roundtrip-admin-token-0123456789';
describe('backup round trip: restore into a new database, a new process serves the same data', () => {
  let source: Awaited<ReturnType<typeof freshDatabase>>;
  let target: Awaited<ReturnType<typeof freshDatabase>>;
  let redis: PrivateRedis;
  const dir = mkdtempSync(join(tmpdir(), 'rj-roundtrip-'));
  const procs: ServiceProcess[] = [];

  beforeAll(async () => {
    [source, target] = await Promise.all([freshDatabase(), freshDatabase()]);
    redis = await PrivateRedis.start();
  });
  afterAll(async () => {
    for (const p of procs) if (p.proc.exitCode === null) p.proc.kill('SIGKILL');
    await redis.stop();
    await source.drop();
    await target.drop();
  });

  const envFor = (url: string, port: number, id: string) => ({
    DATABASE_URL: url,
    REDIS_URL: redis.url,
    RELAY_JOBS_INSTANCE_ID: id,
    RELAY_JOBS_ENV: 'rt',
    RELAY_JOBS_HTTP_PORT: String(port),
    RELAY_JOBS_ADMIN_TOKEN: TOKEN,
    RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
    RELAY_JOBS__REDIS__KEY_PREFIX: uniqueName('rjrt'),
    RELAY_JOBS__DATABASE__POOL_SIZE: '4',
    RELAY_JOBS__BACKUP__DIR: dir,
    RELAY_JOBS__JOBS__BACKUP__CRON: '0 0 1 1 *',
  });
  const call = async (port: number, method: string, path: string, body?: unknown) => {
    const res = await fetch(`http://127.0.0.1:${port}/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as any };
  };

  it('accounts (tokens still decrypt), balances, dashboard numbers and notifications survive backup → restore → new process', { timeout: 240_000 }, async () => {
    const p1 = await freePort();
    const a = ServiceProcess.start('source', envFor(source.url, p1, 'src-1'));
    procs.push(a);
    await a.waitForLine(/relay-jobs started/, 60_000);

    const acct = await call(p1, 'POST', '/accounts', {
      platform: 'anthropic',
      name: 'roundtrip',
      credentials: { access_token: 'sealed-access-token-value', refresh_token: 'sealed-refresh-token-value', expires_at: '2030-01-01T00:00:00Z' },
    });
    expect(acct.status, JSON.stringify(acct.body)).toBe(201);
    const accountId = acct.body.id ?? acct.body.account?.id;
    const user = await call(p1, 'POST', '/billing/users', { external_id: 'rt-user', email: 'rt@example.com' });
    expect(user.status).toBe(201);
    const events = Array.from({ length: 50 }, (_, i) => ({
      request_id: `rt-${i}`,
      user_id: 'rt-user',
      account_id: String(accountId),
      platform: 'claude',
      model: 'sonnet',
      input_tokens: 100 + i,
      output_tokens: 10,
      cost: '0.0125',
      created_at: new Date(Date.now() - 3_600_000).toISOString(),
    }));
    expect((await call(p1, 'POST', '/usage', { events })).status).toBe(200);
    const from = new Date(Date.now() - 2 * 86_400_000).toISOString();
    const to = new Date(Date.now() + 86_400_000).toISOString();
    const re = await call(p1, 'POST', '/usage/recompute', { from, to });
    await waitFor(async () => (await call(p1, 'GET', `/usage/recompute/${re.body.id}`)).body.status === 'done', { what: 'the rollup recompute' });
    const c = new pg.Client({ connectionString: source.url });
    await c.connect();
    await c.query(`UPDATE billing_users SET balance = 123456 WHERE id = $1`, [user.body.id]);
    await c.query(`INSERT INTO notification_deliveries (dedup_key, channel, recipient, template, params) VALUES ('rt-1', 'email', 'rt@example.com', 'expiry', '{"days": 3}')`);
    const sealed = (await c.query(`SELECT * FROM accounts WHERE id = $1`, [accountId])).rows[0];
    await c.end();
    expect(JSON.stringify(sealed)).not.toContain('sealed-access-token-value'); // at rest it is sealed, so the dump holds no plaintext
    const dashboard = (await call(p1, 'GET', `/dashboard/usage?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&granularity=day`)).body;
    expect(dashboard.points.reduce((n: number, p: { requests: number }) => n + p.requests, 0)).toBe(50);
    const token = (await call(p1, 'POST', `/accounts/${accountId}/token`)).body;
    expect(JSON.stringify(token)).toContain('sealed-access-token-value');

    // relay-jobs backup --wait, against the running service.
    const b = await runCli(['backup', '--wait'], envFor(source.url, p1, 'cli'), 120_000);
    expect(b.stderr).toBe('');
    expect(b.code).toBe(0);
    const id = /backup (\S+) verified/.exec(b.stdout)![1]!;
    const list = await runCli(['backups'], envFor(source.url, p1, 'cli'));
    expect(list.stdout).toMatch(new RegExp(`${id}\\s+verified\\s+manual`));
    a.proc.kill('SIGTERM');
    expect(await a.exited).toBe(0);

    // relay-jobs restore <id> --target <new database>
    const r = await runCli(['restore', id, '--target', target.url], envFor(source.url, p1, 'cli'), 120_000);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('(row counts match the backup)');

    // A new process on the restored database, same master key.
    const p2 = await freePort();
    const bproc = ServiceProcess.start('restored', envFor(target.url, p2, 'src-1'));
    procs.push(bproc);
    await bproc.waitForLine(/relay-jobs started/, 60_000);
    expect((await call(p2, 'POST', `/accounts/${accountId}/token`)).body).toEqual(token);
    expect((await call(p2, 'GET', `/billing/users/${user.body.id}`)).body.balance).toBe(123456);
    expect((await call(p2, 'GET', `/dashboard/usage?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&granularity=day`)).body).toEqual(dashboard);
    const notes = (await call(p2, 'GET', '/notifications')).body;
    expect(JSON.stringify(notes)).toContain('rt-1');
    bproc.proc.kill('SIGTERM');
    expect(await bproc.exited).toBe(0);
  });
});

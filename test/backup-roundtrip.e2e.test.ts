import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from './helpers/cli.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { waitFor } from './helpers/wait.js';

/**
 * The whole point of a backup: data from every area (accounts with sealed credentials, usage
 * and its rollups, billing, notifications) is backed up through the CLI, restored into a new
 * database, and a new relay-jobs process on it serves the same tokens, balances and dashboard.
 */
const TOKEN = 'roundtrip-admin-token-0123456789';
describe('backup round trip: restore into a new database, a new process serves the same data', () => {
  // Two clusters of the harness on one Redis: `source` (the service that is backed up) and `target`
  // (an empty database the backup is restored into, then a new process on it). Both databases start
  // empty: the replicas migrate them, as in production.
  let source: Cluster;
  let target: Cluster;
  const dir = mkdtempSync(join(tmpdir(), 'rj-roundtrip-'));
  const env = {
    RELAY_JOBS_ENV: 'rt',
    // The defaults for these, not the harness's.
    RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: undefined,
    RELAY_JOBS__JOBS__SESSION_CLEANUP__ENABLED: undefined,
    RELAY_JOBS__REDIS__COMMAND_TIMEOUT: undefined,
    RELAY_JOBS__BACKUP__DIR: dir,
    RELAY_JOBS__JOBS__BACKUP__CRON: '0 0 1 1 *',
  };

  beforeAll(async () => {
    source = await startCluster({ replicas: 0, migrate: false, adminToken: TOKEN, env });
    target = await startCluster({ replicas: 0, migrate: false, redis: source.redis!, adminToken: TOKEN, env });
  });
  afterAll(async () => {
    await target?.stop();
    await source?.stop();
  });

  /** A request to the one replica of `cluster`. */
  const call = async (cluster: Cluster, method: string, path: string, body?: unknown) => {
    const res = await cluster.api(0, path, { method, body });
    return { status: res.status, body: (await res.json()) as any };
  };

  it('accounts (tokens still decrypt), balances, dashboard numbers and notifications survive backup → restore → new process', { timeout: 240_000 }, async () => {
    const a = await source.addReplica('src-1');
    await a.waitStarted(60_000);
    // The CLI runs with the service's configuration (its http.port is how it reaches the service).
    const cliEnv = { ...a.env, RELAY_JOBS_INSTANCE_ID: 'cli' };

    const acct = await call(source, 'POST', '/accounts', {
      platform: 'anthropic',
      name: 'roundtrip',
      credentials: { access_token: 'sealed-access-token-value', refresh_token: 'sealed-refresh-token-value', expires_at: '2030-01-01T00:00:00Z' },
    });
    expect(acct.status, JSON.stringify(acct.body)).toBe(201);
    const accountId = acct.body.id ?? acct.body.account?.id;
    const user = await call(source, 'POST', '/billing/users', { external_id: 'rt-user', email: 'rt@example.com' });
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
    expect((await call(source, 'POST', '/usage', { events })).status).toBe(200);
    const from = new Date(Date.now() - 2 * 86_400_000).toISOString();
    const to = new Date(Date.now() + 86_400_000).toISOString();
    const re = await call(source, 'POST', '/usage/recompute', { from, to });
    await waitFor(async () => (await call(source, 'GET', `/usage/recompute/${re.body.id}`)).body.status === 'done', { what: 'the rollup recompute' });
    const c = await source.sql();
    await c.query(`UPDATE billing_users SET balance = 123456 WHERE id = $1`, [user.body.id]);
    await c.query(`INSERT INTO notification_deliveries (dedup_key, channel, recipient, template, params) VALUES ('rt-1', 'email', 'rt@example.com', 'expiry', '{"days": 3}')`);
    const sealed = (await c.query(`SELECT * FROM accounts WHERE id = $1`, [accountId])).rows[0];
    expect(JSON.stringify(sealed)).not.toContain('sealed-access-token-value'); // at rest it is sealed, so the dump holds no plaintext
    const dashboard = (await call(source, 'GET', `/dashboard/usage?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&granularity=day`)).body;
    expect(dashboard.points.reduce((n: number, p: { requests: number }) => n + p.requests, 0)).toBe(50);
    const token = (await call(source, 'POST', `/accounts/${accountId}/token`)).body;
    expect(JSON.stringify(token)).toContain('sealed-access-token-value');

    // relay-jobs backup --wait, against the running service.
    const b = await runCli(['backup', '--wait'], cliEnv, 120_000);
    expect(b.stderr).toBe('');
    expect(b.code).toBe(0);
    const id = /backup (\S+) verified/.exec(b.stdout)![1]!;
    const list = await runCli(['backups'], cliEnv);
    expect(list.stdout).toMatch(new RegExp(`${id}\\s+verified\\s+manual`));
    expect(await a.kill('SIGTERM')).toBe(0);

    // relay-jobs restore <id> --target <new database>
    const r = await runCli(['restore', id, '--target', target.databaseUrl!], cliEnv, 120_000);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('(row counts match the backup)');

    // A new process on the restored database, same master key.
    const restored = await target.addReplica('src-1');
    await restored.waitStarted(60_000);
    expect((await call(target, 'POST', `/accounts/${accountId}/token`)).body).toEqual(token);
    expect((await call(target, 'GET', `/billing/users/${user.body.id}`)).body.balance).toBe(123456);
    expect((await call(target, 'GET', `/dashboard/usage?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&granularity=day`)).body).toEqual(dashboard);
    const notes = (await call(target, 'GET', '/notifications')).body;
    expect(JSON.stringify(notes)).toContain('rt-1');
    expect(await restored.kill('SIGTERM')).toBe(0);
  });
});

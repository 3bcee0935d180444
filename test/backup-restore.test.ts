import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { runCli } from './helpers/cli.js';
import { REDIS_URL, freePort, freshDatabase, TEST_MASTER_KEY } from './helpers/services.js';
import { backupEnv } from './helpers/backup-env.js';
import type { BackupRecord } from '../src/areas/backup/store/backups.js';

async function q<R extends pg.QueryResultRow>(url: string, text: string): Promise<R[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<R>(text)).rows;
  } finally {
    await c.end();
  }
}

const tableCount = async (url: string) => Number((await q<{ n: string }>(url, `SELECT count(*) AS n FROM pg_tables WHERE schemaname = 'public'`))[0]!.n);

describe('relay-jobs restore (real processes, real PostgreSQL)', () => {
  let env: Awaited<ReturnType<typeof backupEnv>>;
  let rec: BackupRecord;
  const targets: Array<Awaited<ReturnType<typeof freshDatabase>>> = [];
  const target = async () => {
    const t = await freshDatabase();
    targets.push(t);
    return t;
  };

  beforeAll(async () => {
    env = await backupEnv({ verify: false });
    await env.db.query(`INSERT INTO billing_users (external_id, balance) SELECT 'u' || g, g FROM generate_series(1, 2000) g`);
    await env.db.query(`INSERT INTO instances (instance_id, boot_id, env, mode, hostname, pid, version) VALUES ('source-1', gen_random_uuid(), 'test', 'cluster', 'h', 1, 'v')`);
    rec = await (await env.service.start('manual')).done;
    expect(rec.state).toBe('completed');
  });
  afterAll(async () => {
    for (const t of targets) await t.drop();
    await env.cleanup();
  });

  it('restores a file into an empty database after checking its checksum, with progress; the copy holds no live replica and no running backup', async () => {
    const t = await target();
    const r = await runCli(['restore', rec.location, '--target', t.url], {}, 60_000);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`checksum ok (sha256 ${rec.sha256})`);
    expect(r.stdout).toMatch(/restoring: \d+% of [\d.]+ MB read, \d+ tables, loading public\.billing_users/);
    expect(r.stdout).toMatch(/restored \d+ tables, \d+ rows into/);
    expect((await q<{ n: string }>(t.url, 'SELECT count(*) AS n FROM billing_users'))[0]!.n).toBe('2000');
    expect((await q<{ n: string }>(t.url, 'SELECT sum(balance) AS n FROM billing_users'))[0]!.n).toBe(String((2000 * 2001) / 2));
    expect(await q(t.url, `SELECT 1 FROM instances WHERE stopped_at IS NULL`)).toEqual([]);
    expect(await q(t.url, `SELECT 1 FROM backups WHERE state = 'running'`)).toEqual([]);

    // The same target again: not empty → refused, one line, exit 2, untouched.
    const again = await runCli(['restore', rec.location, '--target', t.url], {}, 60_000);
    expect(again.code).toBe(2);
    expect(again.stderr.trim().split('\n')).toHaveLength(1);
    expect(again.stderr).toMatch(/refusing to restore into .*: it is not empty \(\d+ relations, e\.g\. .*\); pass --force to empty it first/);
    await q(t.url, `INSERT INTO plans (name, price, duration_days) VALUES ('extra', 1, 1)`);
    // --force empties it first; the extra row is gone. This run names the backup by id (next test).
    const forced = await restoreById(t.url, ['--force']);
    expect(forced.stderr).toBe('');
    expect(forced.code).toBe(0);
    expect(forced.stdout).toMatch(/--force: emptying/);
    expect(await q(t.url, `SELECT 1 FROM plans WHERE name = 'extra'`)).toEqual([]);
    forcedById = forced;
  });

  /** `relay-jobs restore <id>`: the backup found through the configured storage and database. */
  const restoreById = (targetUrl: string, extra: string[] = []) =>
    runCli(
      ['restore', rec.id, '--target', targetUrl, ...extra],
      {
        DATABASE_URL: env.url,
        REDIS_URL,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS_INSTANCE_ID: 'restorer',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__BACKUP__DIR: env.dir,
      },
      60_000,
    );
  let forcedById: Awaited<ReturnType<typeof runCli>> | undefined;

  // The previous test's --force run restored by id: one CLI run (and one target) for both checks.
  it("restores by backup id from the configured storage and checks the restored row counts against the backup's", () => {
    const r = forcedById!;
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/of \d+ tables/);
    expect(r.stdout).toContain('(row counts match the backup)');
  });

  it('a checksum mismatch is refused before the target is touched', async () => {
    const t = await target();
    const bad = `${env.dir}/corrupt.dump.gz`;
    const bytes = readFileSync(rec.location);
    bytes[Math.floor(bytes.length / 2)]! ^= 0xff;
    writeFileSync(bad, bytes);
    copyFileSync(`${rec.location}.sha256`, `${bad}.sha256`);
    const r = await runCli(['restore', bad, '--target', t.url], {}, 60_000);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/corrupt\.dump\.gz: checksum mismatch \(sha256 [0-9a-f]{64}, expected [0-9a-f]{64}\); nothing was restored/);
    // A valid gzip whose bytes are not the recorded ones: the checksum refuses it.
    const { gunzipSync, gzipSync } = await import('node:zlib');
    const other = `${env.dir}/other.dump.gz`;
    writeFileSync(other, gzipSync(gunzipSync(readFileSync(rec.location)), { level: 1 }));
    copyFileSync(`${rec.location}.sha256`, `${other}.sha256`);
    const m = await runCli(['restore', other, '--target', t.url], {}, 60_000);
    expect(m.code).toBe(2);
    expect(m.stderr).toMatch(new RegExp(`other\\.dump\\.gz: checksum mismatch \\(sha256 [0-9a-f]{64}, expected ${rec.sha256}\\); nothing was restored`));
    expect(await tableCount(t.url)).toBe(0);
  });

  it('a truncated dump without a checksum file is refused (the gzip stream is incomplete); nothing restored', async () => {
    const t = await target();
    const cut = `${env.dir}/truncated.dump.gz`;
    const bytes = readFileSync(rec.location);
    writeFileSync(cut, bytes.subarray(0, Math.floor(bytes.length * 0.6)));
    const r = await runCli(['restore', cut, '--target', t.url], {}, 60_000);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^relay-jobs: .*truncated\.dump\.gz is truncated or corrupt \(unexpected end of file\); nothing was restored\n$/);
    expect(await tableCount(t.url)).toBe(0);
  });

  it('a dump whose gzip is fine but whose archive is not is rolled back: nothing half-restored', async () => {
    const t = await target();
    // A valid gzip of a broken archive: pg_restore fails part-way, the single transaction rolls back.
    const { gunzipSync, gzipSync } = await import('node:zlib');
    const raw = gunzipSync(readFileSync(rec.location));
    const broken = `${env.dir}/broken.dump.gz`;
    writeFileSync(broken, gzipSync(raw.subarray(0, Math.floor(raw.length * 0.7))));
    const r = await runCli(['restore', broken, '--target', t.url], {}, 60_000);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/restore into .* failed and was rolled back: pg_restore failed/);
    expect(await tableCount(t.url)).toBe(0);
  });

  it('relay-jobs backup names a service it cannot reach, in one line', async () => {
    const port = await freePort();
    const cliEnv = { RELAY_JOBS_ADMIN_TOKEN: 'an-admin-token-0123456789', RELAY_JOBS_HTTP_PORT: String(port), RELAY_JOBS_DATA_DIR: env.dir };
    // Embedded, no process holds the data directory's lock file: said at once (issue 52, 7d).
    const none = await runCli(['backup', '--wait'], cliEnv);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/^relay-jobs: no relay-jobs service is running on data directory .*: start it with `relay-jobs start`, or pass --url\n$/);
    const r = await runCli(['backup', '--wait', '--url', `http://127.0.0.1:${port}`], cliEnv);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^relay-jobs: cannot reach relay-jobs at http://127\\.0\\.0\\.1:${port} \\(.*\\): is \`relay-jobs start\` running\\? \\(--url\\)\n$`));
  });

  it('refuses while replicas are live on the target, and names an unreachable target', async () => {
    const t = await target();
    await q(t.url, `CREATE TABLE instances (instance_id text, stopped_at timestamptz, heartbeat_at timestamptz)`);
    await q(t.url, `INSERT INTO instances VALUES ('live-1', NULL, clock_timestamp())`);
    const r = await runCli(['restore', rec.location, '--target', t.url, '--force'], {}, 60_000);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/replicas are live on it \(live-1\); stop them first/);
    const down = await runCli(['restore', rec.location, '--target', 'postgres://postgres@127.0.0.1:1/nowhere'], {}, 60_000);
    expect(down.code).toBe(2);
    expect(down.stderr).toMatch(/^relay-jobs: cannot connect to PostgreSQL at .* \(--target\)/);
  });
});

import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { BackupBusy } from '../src/areas/backup/backup-service.js';
import { LIVENESS_LOOK_MS } from '../src/areas/backup/store/backups.js';
import { LivenessSession } from '../src/coordination/liveness.js';
import { LIVENESS_NS } from '../src/store/liveness-sql.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { PG_ADMIN_URL, roleConnection } from './helpers/services.js';
import { backupEnv } from './helpers/backup-env.js';
import { waitFor } from './helpers/wait.js';
import { Deadline } from '../src/time/deadline.js';
import { systemClock } from '../src/time/clock.js';

async function databasesLike(pattern: string): Promise<string[]> {
  const c = new pg.Client({ connectionString: PG_ADMIN_URL });
  await c.connect();
  const { rows } = await c.query<{ datname: string }>('SELECT datname FROM pg_database WHERE datname LIKE $1', [pattern]);
  await c.end();
  return rows.map((r) => r.datname);
}
describe('backup on real PostgreSQL with pg_dump/pg_restore, directory storage', () => {
  let env: Awaited<ReturnType<typeof backupEnv>>;
  beforeAll(async () => {
    env = await backupEnv();
    await env.db.query(`INSERT INTO billing_users (external_id, email, balance) SELECT 'u' || g, 'u' || g || '@example.com', g * 100 FROM generate_series(1, 500) g`);
  });
  afterAll(async () => env.cleanup());

  it('streams pg_dump through gzip into <env>/<db>/<YYYYMMDD-HHMMSS>-<id>.dump.gz, records the SHA-256 of the stored bytes, and verifies by restoring', async () => {
    const { id, done } = await env.service.start('manual');
    const rec = await done;
    expect(rec.error).toBeNull();
    expect(rec.state).toBe('verified');
    expect(rec.object_key).toMatch(new RegExp(`^test/${env.name}/\\d{8}-\\d{6}-${id}\\.dump\\.gz$`));
    const bytes = readFileSync(rec.location);
    expect(bytes.subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b]));
    expect(rec.size_bytes).toBe(bytes.length);
    expect(rec.sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
    expect(readFileSync(`${rec.location}.sha256`, 'utf8')).toBe(`${rec.sha256}  ${rec.object_key.split('/').pop()}\n`);
    expect(rec.table_counts!['public.billing_users']).toBe(500);
    expect(rec.instance_id).toBe('replica-a');
    expect(rec.lease_until).toBeNull();
    expect(existsSync(`${rec.location}.partial`)).toBe(false);
    // The scratch database verification restored into is gone.
    expect(await databasesLike(`rj_verify_${id}%`)).toEqual([]);
  });

  it('refuses a second backup while one runs (BackupBusy names it) and never touches a live lease of another replica', async () => {
    const other = env.make('replica-b', 60_000);
    // replica-b's backup is running: its record holds a live lease.
    const started = await env.backups.start({
      id: 'livebackup01',
      trigger: 'manual',
      instanceId: 'replica-b',
      leaseMs: 60_000,
      storage: 'fs',
      location: 'x',
      objectKey: 'test/x/live.dump.gz',
      format: 'pg_dump',
      compression: 'gzip',
      jobRunId: null,
    });
    expect(started).toBe('livebackup01');
    const err = await env.service.start('manual').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackupBusy);
    expect((err as BackupBusy).runningId).toBe('livebackup01');
    expect((err as BackupBusy).instanceId).toBe('replica-b');
    expect(await env.service.reap()).toBe(0);
    expect((await env.backups.get('livebackup01'))!.state).toBe('running');
    await env.backups.finish('livebackup01', 'replica-b', { state: 'failed', error: 'test over' });
    void other;
  });

  it('an expired lease (killed replica) is marked failed and its partial objects removed; the next backup succeeds', async () => {
    const key = `test/${env.name}/20260101-000000-deadbeef0001.dump.gz`;
    const partial = `${env.dir}/${key}.partial`;
    mkdirSync(dirname(partial), { recursive: true });
    writeFileSync(partial, 'half a dump');
    await env.backups.start({
      id: 'deadbeef0001',
      trigger: 'schedule',
      instanceId: 'replica-c',
      leaseMs: 300,
      storage: 'fs',
      location: `${env.dir}/${key}`,
      objectKey: key,
      format: 'pg_dump',
      compression: 'gzip',
      jobRunId: null,
    });
    // Before expiry nobody touches it.
    expect(await env.service.start('manual').catch((e: unknown) => e)).toBeInstanceOf(BackupBusy);
    await waitFor(async () => (await env.service.reap()) === 1, { what: 'the lease to expire' });
    const dead = (await env.backups.get('deadbeef0001'))!;
    expect(dead.state).toBe('failed');
    expect(dead.error).toMatch(/abandoned: instance replica-c stopped renewing its lease/);
    expect(existsSync(partial)).toBe(false);
    const rec = await (await env.service.start('schedule')).done;
    expect(rec.state).toBe('verified');
  });

  it("a writer's backup is free the moment its liveness session ends (the one lease rule), long before its lease expires; the next look comes within 5 s", async () => {
    const writer = new LivenessSession(env.db, silentLogger(), 100);
    await writer.start();
    const record = (id: string, aliveKey: number | null) =>
      env.backups.start({
        id,
        trigger: 'manual',
        instanceId: 'replica-d',
        leaseMs: 3_600_000,
        storage: 'fs',
        location: 'x',
        objectKey: `test/x/${id}.dump.gz`,
        format: 'pg_dump',
        compression: 'gzip',
        jobRunId: null,
        aliveKey,
      });
    expect(await record('alivebackup1', writer.key)).toBe('alivebackup1');
    // Alive: not reaped, refused to a second writer, and the reaper looks again within LIVENESS_LOOK_MS (not in an hour).
    const { reaped, nextExpiryMs } = await env.backups.reapAndNext();
    expect(reaped).toEqual([]);
    expect(nextExpiryMs).toBeLessThanOrEqual(LIVENESS_LOOK_MS);
    expect(await env.service.start('manual').catch((e: unknown) => e)).toBeInstanceOf(BackupBusy);
    // A crash: the writer's backend is killed, the server frees its liveness lock.
    await env.db.query(`SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::int::oid AND objid = $2::int::oid`, [LIVENESS_NS, writer.key]);
    await writer.stop(Deadline.within(systemClock, 1000));
    await waitFor(async () => (await env.service.reap()) === 1, { what: "the dead writer's backup to be reaped" });
    const dead = (await env.backups.get('alivebackup1'))!;
    expect(dead.state).toBe('failed');
    expect(dead.error).toMatch(/abandoned: instance replica-d stopped renewing its lease \(its process ended: its liveness session is gone\)/);
    // Without a key (embedded mode) the lease alone decides: an hour-long lease is not free.
    expect(await record('nokeybackup1', null)).toBe('nokeybackup1');
    expect((await env.backups.reapAndNext()).reaped).toEqual([]);
    await env.backups.finish('nokeybackup1', 'replica-d', { state: 'failed', error: 'test over' });
  });

  it("a role without CREATEDB (the deployment docs' least privilege before they granted it): verify_failed saying what to grant, the dump kept", async () => {
    const { role, url, db: roleDb, drop } = await roleConnection(env.url);
    const limited = await backupEnv({ verifyAs: { db: roleDb, url }, keepLast: 1 });
    try {
      const rec = await (await limited.service.start('manual')).done;
      expect(rec.state).toBe('verify_failed');
      expect(rec.verify_error).toMatch(
        new RegExp(
          `^verification could not start: permission denied to create database; the service's role ${role} may not create the scratch database rj_verify_\\w+: grant it \\(ALTER ROLE ${role} CREATEDB\\) or set backup\\.verify: false$`,
        ),
      );
      // The dump itself is good: kept, with its checksum file, and its SHA-256 matches.
      expect(rec.size_bytes).toBeGreaterThan(0);
      expect(createHash('sha256').update(readFileSync(rec.location)).digest('hex')).toBe(rec.sha256);
      expect(existsSync(`${rec.location}.sha256`)).toBe(true);
      expect(await databasesLike('rj\\_verify\\_%')).toEqual([]);
      // Retention still runs after a verify_failed backup (keep_last 1 here): the dumps do not pile up.
      const next = await (await limited.service.start('manual')).done;
      expect(next.state).toBe('verify_failed');
      expect((await limited.backups.finished()).map((b) => b.id)).toEqual([next.id]);
      expect(existsSync(rec.location)).toBe(false);
    } finally {
      await limited.cleanup();
      await drop();
    }
  });

  it('verification that restores different row counts records verify_failed naming the table', async () => {
    const bad = await backupEnv({
      dumper: (d) => ({
        format: d.format,
        check: () => d.check(),
        dump: async (store, signal) => {
          const r = await d.dump(store, signal);
          return { ...r, counts: { ...r.counts!, 'public.plans': 7 } };
        },
      }),
    });
    try {
      const rec = await (await bad.service.start('manual')).done;
      expect(rec.state).toBe('verify_failed');
      expect(rec.verify_error).toBe(`table public.plans: 7 rows in the dump's snapshot, 0 after restore`);
    } finally {
      await bad.cleanup();
    }
  });
});

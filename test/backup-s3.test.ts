import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { S3Storage } from '../src/areas/backup/s3-storage.js';
import { runCli } from './helpers/cli.js';
import { freshDatabase } from './helpers/services.js';
import { backupEnv } from './helpers/backup-env.js';
import { startS3 } from './helpers/s3-server.js';

const BUCKET = 'relay-backups';
// The SDK reads credentials from the environment. A worker runs several files in one process
// (isolate: false), so the file puts back what it found when it is done.
const AWS_ENV = { AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1' };
const savedAwsEnv = Object.fromEntries(Object.keys(AWS_ENV).map((k) => [k, process.env[k]]));
Object.assign(process.env, AWS_ENV);
afterAll(() => {
  for (const [k, v] of Object.entries(savedAwsEnv)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});

async function readAll(s: NodeJS.ReadableStream): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of s) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

describe('backup to S3 (a real S3-compatible server, s3rver, on loopback)', () => {
  let s3: Awaited<ReturnType<typeof startS3>>;
  let storage: S3Storage;
  let env: Awaited<ReturnType<typeof backupEnv>>;
  const targets: Array<Awaited<ReturnType<typeof freshDatabase>>> = [];
  beforeAll(async () => {
    s3 = await startS3(BUCKET);
    // 5 MB parts: a dump over 5 MB goes up as a real multipart upload.
    storage = new S3Storage({ bucket: BUCKET, prefix: 'relay/', region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true, partSizeMb: 5 });
    env = await backupEnv({ storage, keepLast: 1 });
    // Incompressible-ish rows so the gzip stream passes one part.
    await env.db.query(
      `INSERT INTO billing_users (external_id, email) SELECT md5(g::text) || md5((g * 7)::text) || md5((g * 13)::text), md5(g::text || 'x') || '@example.com' FROM generate_series(1, 80000) g`,
    );
  });
  afterAll(async () => {
    for (const t of targets) await t.drop();
    storage.close();
    await env.cleanup();
    await s3.close();
  });

  it('uploads with multipart, records the checksum of the stored object, verifies by restoring, and restores from its s3:// URI', { timeout: 180_000 }, async () => {
    const rec = await (await env.service.start('manual')).done;
    expect(rec.error).toBeNull();
    expect(rec.state).toBe('verified');
    expect(rec.size_bytes).toBeGreaterThan(5 * 1024 * 1024);
    expect(rec.location).toBe(`s3://${BUCKET}/relay/${rec.object_key}`);
    const { stream } = await storage.open(rec.object_key);
    const bytes = await readAll(stream);
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(rec.sha256);
    expect((await storage.readText(`${rec.object_key}.sha256`))!.startsWith(rec.sha256!)).toBe(true);

    const t = await freshDatabase();
    targets.push(t);
    const r = await runCli(
      ['restore', rec.location, '--target', t.url],
      {
        AWS_ACCESS_KEY_ID: 'S3RVER',
        AWS_SECRET_ACCESS_KEY: 'S3RVER',
        RELAY_JOBS__BACKUP__S3__BUCKET: BUCKET,
        RELAY_JOBS__BACKUP__S3__ENDPOINT: s3.endpoint,
        RELAY_JOBS__BACKUP__S3__FORCE_PATH_STYLE: 'true',
      },
      90_000,
    );
    expect(r.stderr).not.toMatch(/relay-jobs:/);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`checksum ok (sha256 ${rec.sha256})`);
    const c = new pg.Client({ connectionString: t.url });
    await c.connect();
    expect((await c.query('SELECT count(*)::int AS n FROM billing_users')).rows[0].n).toBe(80000);
    await c.end();

    // keep_last 1: the next good backup prunes this one (object, checksum file and record). What
    // is checked is the pruning, not the size: the rows go first, so it is not a second 5 MB dump,
    // upload and verifying restore. TRUNCATE, not DELETE: the tables that reference users are
    // empty here, and deleting 80,000 rows one foreign-key check at a time costs ~2 s of server CPU.
    await env.db.query('TRUNCATE billing_users CASCADE');
    const next = await (await env.service.start('schedule')).done;
    expect(next.state).toBe('verified');
    expect(await env.backups.get(rec.id)).toBeNull();
    expect(await storage.readText(`${rec.object_key}.sha256`)).toBeNull();
    await expect(storage.open(rec.object_key)).rejects.toThrow(/cannot be read: NoSuchKey/);
  });

  it('unreachable storage and wrong credentials fail before any record is written, in one line', { timeout: 60_000 }, async () => {
    const before = (await env.backups.list()).length;
    const down = new S3Storage({ bucket: BUCKET, prefix: '', region: 'us-east-1', endpoint: 'http://127.0.0.1:1', forcePathStyle: true, partSizeMb: 5 });
    const e1 = await backupEnv({ storage: down });
    try {
      const err = (await e1.service.start('manual').catch((e: unknown) => e)) as Error;
      expect(err.message).toMatch(/^S3 bucket relay-backups at http:\/\/127\.0\.0\.1:1 cannot be reached: /);
      expect(err.message).not.toContain('\n');
      expect(await e1.backups.list()).toEqual([]);
    } finally {
      down.close();
      await e1.cleanup();
    }
    // s3rver checks the access key id (not the signature): an unknown key is the wrong-credentials case it can show.
    process.env.AWS_ACCESS_KEY_ID = 'WRONGKEY';
    process.env.AWS_SECRET_ACCESS_KEY = 'wrong-secret';
    const wrong = new S3Storage({ bucket: BUCKET, prefix: '', region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true, partSizeMb: 5 });
    try {
      const err = (await wrong.check().catch((e: unknown) => e)) as Error;
      expect(err.message).toMatch(/^S3 bucket relay-backups at .* cannot be reached: access denied \(HTTP 403\): check AWS_ACCESS_KEY_ID/);
      expect(err.message).not.toContain('wrong-secret');
    } finally {
      process.env.AWS_ACCESS_KEY_ID = 'S3RVER';
      process.env.AWS_SECRET_ACCESS_KEY = 'S3RVER';
      wrong.close();
    }
    expect((await env.backups.list()).length).toBe(before);
  });
});

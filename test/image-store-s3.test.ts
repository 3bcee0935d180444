import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { TERMINAL } from '../src/areas/images/store/image-batches.js';
import { S3ObjectStore } from '../src/areas/images/s3-object-store.js';
import { ObjectStoreUnavailable } from '../src/areas/images/object-store.js';
import { CHECKS } from '../src/areas/doctor/index.js';
import { FakeImageProvider } from './fixtures/image-provider.js';
import { startS3 } from './helpers/s3-server.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { waitFor } from './helpers/wait.js';

const BUCKET = 'relay-images';
const ADMIN = 'images-s3-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
const PRICE = 5;
const AWS_ENV = { AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1' };
const savedAwsEnv = Object.fromEntries(Object.keys(AWS_ENV).map((k) => [k, process.env[k]]));

/** A TCP hop in front of s3rver that the test can cut: down, every connection is refused at once (an object-store outage). */
class Outage {
  down = false;
  private readonly sockets = new Set<Socket>();
  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}
  static async start(targetPort: number): Promise<Outage> {
    let self: Outage | null = null;
    const server = createServer((client) => {
      if (!self || self.down) return void client.destroy();
      const upstream = createConnection({ host: '127.0.0.1', port: targetPort });
      for (const s of [client, upstream]) {
        self.sockets.add(s);
        s.on('close', () => self?.sockets.delete(s));
        s.on('error', () => undefined);
      }
      client.pipe(upstream).pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    self = new Outage(server, (server.address() as { port: number }).port);
    return self;
  }
  cut(): void {
    this.down = true;
    for (const s of this.sockets) s.destroy();
  }
  restore(): void {
    this.down = false;
  }
  close(): Promise<void> {
    this.cut();
    return new Promise((r) => this.server.close(() => r()));
  }
}

/**
 * `image.storage: s3` in one process against real PostgreSQL and a real S3-compatible server
 * (s3rver) reached through a hop the test can cut: the store itself, retention and the orphan
 * sweep deleting from the bucket, an outage answered with a clear error and no money lost, and
 * the doctor's image_store check.
 */
describe('image batches on S3 (s3rver)', () => {
  let s3: Awaited<ReturnType<typeof startS3>>;
  let hop: Outage;
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  let fake: FakeImageProvider;
  /** A client of its own straight to s3rver: what is really in the bucket. */
  let bucket: S3ObjectStore;
  let seq = 0;
  const prefix = uniqueName('rjimgs3');

  beforeAll(async () => {
    Object.assign(process.env, AWS_ENV);
    s3 = await startS3(BUCKET);
    hop = await Outage.start(Number(new URL(s3.endpoint).port));
    bucket = new S3ObjectStore({ bucket: BUCKET, prefix: 'imgs/', region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true });
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    fake = await FakeImageProvider.start();
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'img-s3-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS_DATA_DIR: embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-images-s3-'))),
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: fake.url,
        RELAY_JOBS__IMAGE__PROVIDER__API_KEY: 'sk-image-s3-secret',
        RELAY_JOBS__IMAGE__PROVIDER__REQUEST_TIMEOUT: '2s',
        RELAY_JOBS__IMAGE__PRICES__IMG_S3: String(PRICE),
        RELAY_JOBS__IMAGE__POLL_INTERVAL: '10ms',
        RELAY_JOBS__IMAGE__RETRY_DELAY: '10ms',
        RELAY_JOBS__IMAGE__MAX_ERRORS: '1000',
        RELAY_JOBS__IMAGE__LEASE: '5s',
        RELAY_JOBS__IMAGE__STORAGE: 's3',
        RELAY_JOBS__IMAGE__S3__BUCKET: BUCKET,
        RELAY_JOBS__IMAGE__S3__ENDPOINT: `http://127.0.0.1:${hop.port}`,
        RELAY_JOBS__IMAGE__S3__PREFIX: 'imgs',
        RELAY_JOBS__IMAGE__S3__FORCE_PATH_STYLE: 'true',
        RELAY_JOBS__IMAGE__ORPHAN_SWEEP_INTERVAL: '1ms',
        RELAY_JOBS__IMAGE__ORPHAN_MIN_AGE: '1ms',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    await http.ready();
  });
  afterAll(async () => {
    await rt?.shutdown();
    await http?.close();
    await fake?.stop();
    await sql?.end();
    await db?.drop();
    await dropRedisPrefix(prefix);
    bucket?.close();
    await hop?.close();
    await s3?.close();
    for (const [k, v] of Object.entries(savedAwsEnv)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  });

  const svc = () => rt.services.imageBatches;
  const newUser = async (balance: number) => {
    const { rows } = await sql.query(`INSERT INTO billing_users (email, balance) VALUES ($1, $2) RETURNING id`, [`s3u${++seq}@test`, balance]);
    return Number(rows[0].id);
  };
  const money = async (user: number) => {
    const { rows } = await sql.query(`SELECT balance, frozen_balance FROM billing_users WHERE id = $1`, [user]);
    return { balance: Number(rows[0].balance), frozen: Number(rows[0].frozen_balance) };
  };
  const submit = async (key: string, payload: object) => {
    const r = await http.inject({ method: 'POST', url: '/api/v1/image-batches', headers: { ...auth, 'idempotency-key': key }, payload });
    expect(r.statusCode, r.body).toBe(202);
    return r.json() as { id: number; hold_amount: number };
  };
  const get = async (id: number) => (await http.inject({ url: `/api/v1/image-batches/${id}`, headers: auth })).json();
  /** One claim tick on this process, until `done(batch)` holds. */
  const driveUntil = (id: number, what: string, done: (b: Awaited<ReturnType<typeof get>>) => boolean) =>
    waitFor(
      async () => {
        await svc().worker.tick();
        await svc().worker.idle();
        const b = await get(id);
        return done(b) ? b : null;
      },
      { what: async () => `batch ${id} ${what}: ${JSON.stringify(await get(id))}`, intervalMs: 20, timeoutMs: 60_000 },
    );
  const keysInBucket = async (under = '') => {
    const keys: string[] = [];
    for await (const page of bucket.list(under)) keys.push(...page.map((o) => o.key));
    return keys.sort();
  };

  it('the S3 store: put, streamed open, list, delete; a missing key is null; an unreachable endpoint is a clear ObjectStoreUnavailable', async () => {
    await bucket.put('t/a.png', Buffer.from('aaa'));
    await bucket.put('t/b/c.png', 'ccc');
    const opened = await bucket.open('t/a.png');
    expect(opened?.size).toBe(3);
    const parts: Buffer[] = [];
    for await (const c of opened!.stream) parts.push(c as Buffer);
    expect(Buffer.concat(parts).toString()).toBe('aaa');
    expect(await bucket.open('t/none.png')).toBeNull();
    expect(await keysInBucket('t/')).toEqual(['t/a.png', 't/b/c.png']);
    await bucket.deletePrefix('t/');
    expect(await keysInBucket('t/')).toEqual([]);
    await bucket.check('doctor-probe/test');
    expect(await keysInBucket('doctor-probe/')).toEqual([]);

    const down = new S3ObjectStore({ bucket: BUCKET, prefix: '', region: 'us-east-1', endpoint: 'http://127.0.0.1:1', forcePathStyle: true });
    try {
      const err = await down.open('x.png').then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ObjectStoreUnavailable);
      expect((err as Error).message).toMatch(/^image store read of s3:\/\/relay-images\/x\.png at http:\/\/127\.0\.0\.1:1 failed: /);
      await expect(down.check('p')).rejects.toThrow(/^S3 bucket relay-images at http:\/\/127\.0\.0\.1:1 cannot be reached: /);
    } finally {
      down.close();
    }
    const noBucket = new S3ObjectStore({ bucket: 'no-such-bucket', prefix: '', region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true });
    try {
      await expect(noBucket.check('p')).rejects.toThrow(/cannot be reached: no such bucket \(HTTP 404\)/);
    } finally {
      noBucket.close();
    }
  });

  it('inputs and images go to the bucket; the image is streamed back; retention deletes the objects from the bucket once; the orphan sweep deletes what no batch references', async () => {
    const user = await newUser(100);
    const b = await submit('s3-ret-1', { user_id: user, model: 'img_s3', prompts: ['one', 'two'], n: 2 });
    const done = await driveUntil(b.id, 'completed', (x) => x.state === 'completed');
    expect(await keysInBucket(`image-batches/${b.id}/`)).toEqual(['input.jsonl', 'p0-0.png', 'p0-1.png', 'p1-0.png', 'p1-1.png'].map((k) => `image-batches/${b.id}/${k}`));
    const img = await http.inject({ url: done.results[1].urls[0], headers: auth });
    expect(img.statusCode).toBe(200);
    expect(img.headers['content-type']).toBe('image/png');
    expect(img.body).toBe(`png:b${b.id}-p1`);
    expect(await money(user)).toEqual({ balance: 100 - 4 * PRICE, frozen: 0 });

    // Orphans: an object of a batch that does not exist, a half-written file of this batch, and a kept image.
    await bucket.put('image-batches/999999999/p0-0.png', 'orphan');
    await bucket.put(`image-batches/${b.id}/p0-0.png.partial`, 'half');

    await sql.query(`UPDATE image_batches SET ended_at = clock_timestamp() - interval '2 days' WHERE id = $1`, [b.id]);
    const first = await svc().maintain();
    expect(first.inputs).toBeGreaterThanOrEqual(1);
    expect(await keysInBucket(`image-batches/${b.id}/`)).toEqual(['p0-0.png', 'p0-1.png', 'p1-0.png', 'p1-1.png'].map((k) => `image-batches/${b.id}/${k}`));
    expect(await keysInBucket('image-batches/999999999/')).toEqual([]);

    await sql.query(`UPDATE image_batches SET ended_at = clock_timestamp() - interval '4 days' WHERE id = $1`, [b.id]);
    // Two maintenance passes at once (as two replicas' rounds): one wins each claim, the batch's objects are deleted once.
    const passes = await Promise.all([svc().maintain(), svc().maintain()]);
    expect(passes.reduce((s, p) => s + p.outputs, 0)).toBe(1);
    expect(await keysInBucket(`image-batches/${b.id}/`)).toEqual([]);
    expect((await get(b.id)).state).toBe('output_deleted');
    expect((await http.inject({ url: done.results[1].urls[0], headers: auth })).statusCode).toBe(404);
    const events = (await get(b.id)).events.filter((e: { to: string }) => e.to === 'output_deleted');
    expect(events).toHaveLength(1);
    expect(await money(user)).toEqual({ balance: 100 - 4 * PRICE, frozen: 0 });
  });

  it('an object-store outage: the image read is a clear 503, the batch waits with the reason and its hold kept, then completes and is captured once', async () => {
    const user = await newUser(200);
    const served = await submit('s3-out-0', { user_id: user, model: 'img_s3', prompts: ['kept'] });
    const servedDone = await driveUntil(served.id, 'completed', (x) => x.state === 'completed');

    fake.faults = { ...fake.faults, pollsToFinish: 1_000_000 };
    const b = await submit('s3-out-1', { user_id: user, model: 'img_s3', prompts: ['a', 'b', 'c'] });
    await driveUntil(b.id, 'running at the provider', (x) => x.state === 'running');

    hop.cut();
    try {
      const r = await http.inject({ url: servedDone.results[0].urls[0], headers: auth });
      expect(r.statusCode).toBe(503);
      expect(r.json()).toMatchObject({ error: { code: 'object_store_unavailable' } });
      expect(r.json().error.message).toMatch(
        /^image store read of s3:\/\/relay-images\/imgs\/image-batches\/\d+\/p0-0\.png at http:\/\/127\.0\.0\.1:\d+ failed: .*; the image is kept, try again once the store answers$/,
      );

      // The provider finishes; indexing cannot store the images: the batch waits in indexing, nothing settled.
      fake.faults = { ...fake.faults, pollsToFinish: 1 };
      const waiting = await driveUntil(b.id, 'waiting on the store', (x) => x.state === 'indexing' && /object store unavailable/.test(x.reason ?? ''));
      expect(waiting.reason).toMatch(/^object store unavailable: image store write of s3:\/\/relay-images\/imgs\/image-batches\/\d+\/p0-0\.png .* failed: .*; retrying, hold kept$/);
      expect(waiting.money.map((m: { step: string }) => m.step)).toEqual(['hold']);
      expect(await money(user)).toEqual({ balance: 200 - PRICE - 3 * PRICE, frozen: 3 * PRICE });
      // The retention pass of a round during the outage does not fail the round.
      await expect(svc().maintain()).resolves.toBeDefined();
    } finally {
      hop.restore();
    }
    const done = await driveUntil(b.id, 'completed', (x) => TERMINAL.includes(x.state));
    expect(done.state).toBe('completed');
    expect(done.money.map((m: { step: string }) => m.step)).toEqual(['hold', 'capture']);
    expect(await money(user)).toEqual({ balance: 200 - PRICE - 3 * PRICE, frozen: 0 });
    const img = await http.inject({ url: done.results[2].urls[0], headers: auth });
    expect(img.statusCode).toBe(200);
    expect(img.body).toBe(`png:b${b.id}-p2`);
  });

  it('an outage that outlasts image.max_errors fails the batch and releases the whole hold, once', async () => {
    const user = await newUser(50);
    const b = await submit('s3-out-2', { user_id: user, model: 'img_s3', prompts: ['x'] });
    // Stopped before the input is stored: nothing has reached the provider.
    await sql.query(`UPDATE image_batches SET errors = 999 WHERE id = $1`, [b.id]);
    hop.cut();
    try {
      const ended = await driveUntil(b.id, 'ended', (x) => TERMINAL.includes(x.state));
      expect(ended).toMatchObject({ state: 'failed', reason: expect.stringMatching(/^gave up after 1000 errors; last: object store unavailable: image store write of .*input\.jsonl/) });
      expect(ended.money.map((m: { step: string }) => m.step)).toEqual(['hold', 'release']);
      expect(fake.createsByOurId.get(String(b.id))).toBeUndefined();
    } finally {
      hop.restore();
    }
    expect(await money(user)).toEqual({ balance: 50, frozen: 0 });
  });

  it('doctor image_store: ok when the bucket answers and takes a write; fail naming the bucket when it does not', async () => {
    const check = CHECKS.find((c) => c.name === 'image_store')!;
    const ctx = { config: rt.config, instances: [], nowMs: Date.now() } as unknown as Parameters<typeof check.run>[0];
    const good = await check.run(ctx);
    expect(good).toMatchObject({ status: 'ok', measured: expect.stringMatching(/^S3 bucket s3:\/\/relay-images\/imgs\/ .* reachable and writable/) });
    expect(await keysInBucket('doctor-probe/')).toEqual([]);
    hop.cut();
    try {
      const bad = await check.run(ctx);
      expect(bad).toMatchObject({ status: 'fail', measured: expect.stringMatching(/^the image store cannot be used: S3 bucket relay-images at http:\/\/127\.0\.0\.1:\d+ cannot be reached/) });
      expect(bad.fix).toMatch(/image\.s3\.bucket/);
    } finally {
      hop.restore();
    }
    const fsConfig = { ...rt.config, mode: 'cluster', image: { ...rt.config.image, storage: 'fs', storage_dir: mkdtempSync(join(tmpdir(), 'rj-img-doctor-')) } };
    const alive = (id: string) => ({ instance_id: id, alive: true });
    const one = await check.run({ ...ctx, config: fsConfig, instances: [alive('a')] } as never);
    expect(one.status).toBe('ok');
    const two = await check.run({ ...ctx, config: fsConfig, instances: [alive('a'), alive('b')] } as never);
    expect(two).toMatchObject({
      status: 'warn',
      measured: expect.stringMatching(/^2 live replicas keep images on their own disk \(image\.storage: fs/),
      fix: expect.stringMatching(/image\.storage: s3/),
    });
  });
});

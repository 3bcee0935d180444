import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { redactConfig } from '../src/config/load.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { BatchWorker } from '../src/areas/images/batch-worker.js';
import { BatchTransitions } from '../src/areas/images/store/image-transitions.js';
import { TERMINAL } from '../src/areas/images/store/image-batches.js';
import { FakeImageProvider } from './fixtures/image-provider.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { waitFor } from './helpers/wait.js';
import { ImagesMetrics } from '../src/areas/images/metrics.js';
import { Deadline } from '../src/time/deadline.js';

const ADMIN = 'images-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
const PRICE = 7;

/** The image batch API, money steps, queue and state machine against real PostgreSQL and the loopback Batch API. */
describe('image batches', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  let fake: FakeImageProvider;
  let seq = 0;
  const prefix = uniqueName('rjimg');
  const dataDir = embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-images-')));

  beforeAll(async () => {
    db = await freshDatabase();
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    fake = await FakeImageProvider.start();
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'img-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS_DATA_DIR: dataDir,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: fake.url,
        RELAY_JOBS__IMAGE__PROVIDER__API_KEY: 'sk-image-secret-do-not-log',
        RELAY_JOBS__IMAGE__PROVIDER__REQUEST_TIMEOUT: '1s',
        RELAY_JOBS__IMAGE__PRICES__IMG_SMALL: String(PRICE),
        RELAY_JOBS__IMAGE__MAX_PROMPTS: '10',
        RELAY_JOBS__IMAGE__POLL_INTERVAL: '10ms',
        RELAY_JOBS__IMAGE__RETRY_DELAY: '10ms',
        RELAY_JOBS__IMAGE__STALE_TIMEOUT: '1500ms',
        RELAY_JOBS__IMAGE__MAX_ERRORS: '4',
        RELAY_JOBS__IMAGE__LEASE: '2s',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    await http.ready();
  });
  afterAll(async () => {
    await rt.shutdown();
    await http.close();
    await fake.stop();
    await sql.end();
    await db.drop();
    await dropRedisPrefix(prefix);
  });
  beforeEach(() => {
    fake.faults = { ...fake.faults, p5xx: 0, p429: 0, pGarbage: 0, pItemFails: 0, pExpire: 0, pBatchFails: 0, pLoseCreateReply: 0, pollsToFinish: 1 };
  });

  const svc = () => rt.services.imageBatches;
  const newUser = async (balance: number) => {
    const { rows } = await sql.query(`INSERT INTO billing_users (email, balance) VALUES ($1, $2) RETURNING id`, [`u${++seq}@test`, balance]);
    return Number(rows[0].id);
  };
  const money = async (user: number) => {
    const { rows } = await sql.query(`SELECT balance, frozen_balance FROM billing_users WHERE id = $1`, [user]);
    return { balance: Number(rows[0].balance), frozen: Number(rows[0].frozen_balance) };
  };
  const submit = (key: string | null, payload: unknown) =>
    http.inject({ method: 'POST', url: '/api/v1/image-batches', headers: { ...auth, ...(key ? { 'idempotency-key': key } : {}) }, payload: payload as object });
  const get = async (id: number) => (await http.inject({ url: `/api/v1/image-batches/${id}`, headers: auth })).json();
  /** Drives the queue on this process until the batch is terminal. */
  const drive = async (id: number, worker: BatchWorker = svc().worker) => {
    await waitFor(
      async () => {
        await worker.tick();
        await worker.idle();
        return TERMINAL.includes((await svc().batches.get(id))!.state);
      },
      { what: async () => `batch ${id} to end: ${JSON.stringify(await get(id))}`, intervalMs: 15, timeoutMs: 30_000 },
    );
    return get(id);
  };
  const settlements = async (id: number) =>
    (await sql.query(`SELECT step, amount, refunded FROM image_batch_money WHERE batch_id = $1 AND step <> 'hold'`, [id])).rows.map((r) => ({
      step: r.step,
      amount: Number(r.amount),
      refunded: Number(r.refunded),
    }));

  it('submit: 202 after the hold and the record commit together; a replay returns the same batch and holds nothing more; another body under the key is 409', async () => {
    const user = await newUser(1000);
    const body = { user_id: user, model: 'img_small', prompts: ['a cat', 'a dog', 'a fox'], n: 2 };
    const r = await submit('k-1', body);
    expect(r.statusCode).toBe(202);
    const b = r.json();
    expect(b).toMatchObject({ state: 'created', image_count: 6, price_per_image: PRICE, hold_amount: 6 * PRICE, replayed: false });
    expect(await money(user)).toEqual({ balance: 1000 - 42, frozen: 42 });
    const queued = await sql.query(`SELECT status FROM image_batch_queue WHERE batch_id = $1`, [b.id]);
    expect(queued.rows).toEqual([{ status: 'ready' }]);

    const again = await submit('k-1', { ...body, prompts: [...body.prompts] });
    expect(again.statusCode).toBe(202);
    expect(again.json()).toMatchObject({ id: b.id, replayed: true });
    expect(await money(user)).toEqual({ balance: 958, frozen: 42 });

    const other = await submit('k-1', { ...body, n: 1 });
    expect(other.statusCode).toBe(409);
    expect(other.json().error.code).toBe('idempotency_conflict');
    expect(await money(user)).toEqual({ balance: 958, frozen: 42 });
    expect(Number((await sql.query(`SELECT count(*) FROM image_batches WHERE user_id = $1`, [user])).rows[0].count)).toBe(1);
  });

  it('bad input is a clear error naming the field, and nothing is held', async () => {
    const user = await newUser(100);
    const cases: Array<[string | null, unknown, number, string]> = [
      [null, { user_id: user, model: 'img_small', prompts: ['x'] }, 400, 'Idempotency-Key'],
      ['b-1', { user_id: user, model: 'no_such_model', prompts: ['x'] }, 400, 'model'],
      ['b-2', { user_id: user, model: 'img_small', prompts: [] }, 400, 'prompts'],
      ['b-3', { user_id: user, model: 'img_small', prompts: Array.from({ length: 11 }, (_, i) => `p${i}`) }, 400, 'prompts'],
      ['b-4', { user_id: user, model: 'img_small', prompts: ['ok', '   '] }, 400, 'prompts.1'],
      ['b-5', { user_id: user, model: 'img_small', prompts: ['x'], size: 'huge' }, 400, 'size'],
      ['b-6', { user_id: user, model: 'img_small', prompts: ['x'], n: 0 }, 400, 'n'],
      ['b-7', { user_id: user, model: 'img_small', prompts: ['x'], colour: 'red' }, 400, 'colour'],
      ['b-8', { user_id: 999_999, model: 'img_small', prompts: ['x'] }, 404, 'user_id'],
    ];
    for (const [key, body, status, field] of cases) {
      const r = await submit(key, body);
      expect(r.statusCode, JSON.stringify(body)).toBe(status);
      expect(r.json().error.fields.map((f: { field: string }) => f.field)).toContain(field);
    }
    // 15 prompts × 1 × 7 = 105 > 100: 402 with the shortfall.
    const short = await submit('b-9', { user_id: user, model: 'img_small', prompts: Array.from({ length: 10 }, () => 'p'), n: 2 });
    expect(short.statusCode).toBe(402);
    expect(short.json().error).toMatchObject({ code: 'insufficient_balance', required: 140, balance: 100, shortfall: 40 });
    expect(await money(user)).toEqual({ balance: 100, frozen: 0 });
    expect(Number((await sql.query(`SELECT count(*) FROM image_batches WHERE user_id = $1`, [user])).rows[0].count)).toBe(0);
  });

  it('an unpriced model and an unconfigured price are refused; the API key never appears in the printed config', () => {
    expect(svc().price('img_small')).toBe(PRICE);
    expect(svc().price('toString')).toBeNull();
    expect(JSON.stringify(redactConfig(rt.config))).not.toContain('sk-image-secret');
    expect(() => loadConfig({ env: { RELAY_JOBS__IMAGE__PRICES__IMG_SMALL: '1.5' } })).toThrow(/image\.prices\.img_small.*integer/);
    expect(() => loadConfig({ env: { RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: 'http://x/api' } })).toThrow(/image\.provider\.base_url.*\/v1/);
    expect(() => loadConfig({ env: { RELAY_JOBS__IMAGE__OUTPUT_RETENTION: '8d' } })).toThrow(/image\.output_retention.*7d/);
  });

  it('happy path: every state in order, images stored, capture = images × price, the rest refunded, one provider batch', async () => {
    const user = await newUser(500);
    const b = (await submit('h-1', { user_id: user, model: 'img_small', prompts: ['one', 'two'], n: 2 })).json();
    fake.faults.pollsToFinish = 2;
    const done = await drive(b.id);
    expect(done.state).toBe('completed');
    expect(done.events.map((e: { to: string }) => e.to)).toEqual(['created', 'uploading', 'submitted', 'running', 'indexing', 'settling', 'completed']);
    expect(done).toMatchObject({ succeeded: 4, failed: 0, captured: 4 * PRICE });
    expect(await settlements(b.id)).toEqual([{ step: 'capture', amount: 28, refunded: 0 }]);
    expect(await money(user)).toEqual({ balance: 500 - 28, frozen: 0 });
    expect(fake.createsByOurId.get(String(b.id))).toBe(1);
    const img = await http.inject({ url: done.results[1].urls[1], headers: auth });
    expect(img.statusCode).toBe(200);
    expect(img.body).toBe(`png:b${b.id}-p1`);
    // The request sent to the provider: one /v1/images/generations line per prompt with our custom_id.
    const input = (await rt.services.imageBatches.store.get(`image-batches/${b.id}/input.jsonl`))!
      .toString()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(input.map((l: { custom_id: string; url: string }) => [l.custom_id, l.url])).toEqual([
      [`b${b.id}-p0`, '/v1/images/generations'],
      [`b${b.id}-p1`, '/v1/images/generations'],
    ]);
  });

  it('partial failures: capture = succeeded images × price, the rest refunded', async () => {
    const user = await newUser(1000);
    const b = (await submit('pf-1', { user_id: user, model: 'img_small', prompts: Array.from({ length: 10 }, (_, i) => `p${i}`) })).json();
    fake.faults.pItemFails = 0.5;
    const done = await drive(b.id);
    expect(done.state).toBe('completed');
    expect(done.succeeded).toBeGreaterThan(0);
    expect(done.succeeded).toBeLessThan(10);
    expect(done.captured).toBe(done.succeeded * PRICE);
    expect(done.results.filter((r: { status: string }) => r.status === 'succeeded').length).toBe(done.succeeded);
    expect(await settlements(b.id)).toEqual([{ step: 'capture', amount: done.succeeded * PRICE, refunded: 70 - done.succeeded * PRICE }]);
    expect(await money(user)).toEqual({ balance: 1000 - done.succeeded * PRICE, frozen: 0 });
  });

  it('a create accepted but whose reply is lost is found by its metadata, never created twice', async () => {
    const user = await newUser(100);
    const b = (await submit('lost-1', { user_id: user, model: 'img_small', prompts: ['x'] })).json();
    fake.faults.pLoseCreateReply = 1;
    fake.faults.lostReplyHoldMs = 3000;
    const lost = fake.lostReplies;
    const done = await drive(b.id);
    expect(fake.lostReplies).toBe(lost + 1);
    expect(done.state).toBe('completed');
    expect(fake.createsByOurId.get(String(b.id))).toBe(1);
    expect(done.events.find((e: { to: string }) => e.to === 'submitted').reason).toMatch(/provider batch batch_/);
  });

  it('a 429 on the lookup after a lost create reply does not allow a second create (found by the chaos test)', async () => {
    const user = await newUser(100);
    const b = (await submit('lost-429', { user_id: user, model: 'img_small', prompts: ['x'] })).json();
    fake.faults.pLoseCreateReply = 1;
    fake.faults.lostReplyHoldMs = 3000;
    const w = svc().worker;
    for (let i = 0; i < 20 && (await svc().batches.get(b.id))!.create_sent_at === null; i++) {
      await w.tick();
      await w.idle();
    }
    expect(fake.createsByOurId.get(String(b.id))).toBe(1);
    fake.faults.pLoseCreateReply = 0;
    fake.faults.p429 = 1;
    fake.faults.retryAfterSeconds = 0;
    await sql.query(`UPDATE image_batch_queue SET status = 'ready', run_at = clock_timestamp() WHERE batch_id = $1 AND status = 'delayed'`, [b.id]);
    await w.tick();
    await w.idle();
    expect((await svc().batches.get(b.id))!.create_sent_at).not.toBeNull();
    fake.faults.p429 = 0;
    expect((await drive(b.id)).state).toBe('completed');
    expect(fake.createsByOurId.get(String(b.id))).toBe(1);
  });

  it('a create that never reached the provider (5xx, ambiguous) is looked up, not resent, and after the stale timeout fails and releases', async () => {
    const user = await newUser(100);
    const b = (await submit('s5-1', { user_id: user, model: 'img_small', prompts: ['x', 'y'] })).json();
    // Let the upload through, then fail the create with a 503.
    const w = svc().worker;
    await sql.query(`UPDATE image_batches SET state = 'uploading' WHERE id = $1`, [b.id]);
    const file = await fetch(`${fake.url}/files`, {
      method: 'POST',
      body: (() => {
        const f = new FormData();
        f.append('purpose', 'batch');
        f.append('file', new Blob(['{}\n']), 'x.jsonl');
        return f;
      })(),
    }).then((r) => r.json());
    await sql.query(`UPDATE image_batches SET input_file_id = $2 WHERE id = $1`, [b.id, file.id]);
    fake.faults.p5xx = 1;
    await w.tick();
    await w.idle();
    fake.faults.p5xx = 0;
    const mid = await svc().batches.get(b.id);
    expect(mid).toMatchObject({ state: 'uploading', provider_batch_id: null });
    expect(mid!.create_sent_at).not.toBeNull();
    const done = await drive(b.id);
    expect(done.state).toBe('failed');
    expect(done.reason).toMatch(/no such batch after the stale timeout/);
    expect(fake.createsByOurId.get(String(b.id)) ?? 0).toBe(0);
    expect(await settlements(b.id)).toEqual([{ step: 'release', amount: 14, refunded: 14 }]);
    expect(await money(user)).toEqual({ balance: 100, frozen: 0 });
  });

  it('a 429 with Retry-After delays the batch by that long (status delayed), then it completes', async () => {
    const user = await newUser(100);
    const b = (await submit('r429', { user_id: user, model: 'img_small', prompts: ['x'] })).json();
    fake.faults.p429 = 1;
    fake.faults.retryAfterSeconds = 30;
    const w = svc().worker;
    await w.tick();
    await w.idle();
    const q = (await sql.query(`SELECT status, run_at - clock_timestamp() AS wait FROM image_batch_queue WHERE batch_id = $1`, [b.id])).rows[0];
    expect(q.status).toBe('delayed');
    expect(q.wait.seconds ?? 0).toBeGreaterThanOrEqual(25);
    expect((await svc().batches.get(b.id))!.errors).toBe(1);
    fake.faults.p429 = 0;
    await sql.query(`UPDATE image_batch_queue SET run_at = clock_timestamp() WHERE batch_id = $1`, [b.id]);
    expect((await drive(b.id)).state).toBe('completed');
  });

  it('garbage replies are retried with a clear reason; after image.max_errors the batch fails and its hold is released', async () => {
    const user = await newUser(100);
    const b = (await submit('garb', { user_id: user, model: 'img_small', prompts: ['x'] })).json();
    fake.faults.pGarbage = 1;
    const done = await drive(b.id);
    expect(done.state).toBe('failed');
    expect(done.reason).toMatch(/gave up after 4 provider errors; last: image provider: .*not JSON/);
    expect(done.events.filter((e: { reason: string | null }) => /not JSON/.test(e.reason ?? '')).length).toBeGreaterThanOrEqual(1);
    expect(await settlements(b.id)).toEqual([{ step: 'release', amount: 7, refunded: 7 }]);
    expect(await money(user)).toEqual({ balance: 100, frozen: 0 });
  });

  it('a provider batch that fails releases the hold; one that expires captures what was produced', async () => {
    const user = await newUser(1000);
    const f = (await submit('bf', { user_id: user, model: 'img_small', prompts: ['x', 'y'] })).json();
    fake.faults.pBatchFails = 1;
    expect(await drive(f.id)).toMatchObject({ state: 'failed', reason: 'provider batch failed with no output', captured: 0 });
    fake.faults.pBatchFails = 0;
    fake.faults.pExpire = 1;
    const e = (await submit('be', { user_id: user, model: 'img_small', prompts: Array.from({ length: 10 }, (_, i) => `p${i}`) })).json();
    const done = await drive(e.id);
    expect(['completed', 'failed']).toContain(done.state);
    expect(done.captured).toBe(done.succeeded * PRICE);
    expect(await money(user)).toEqual({ balance: 1000 - done.captured, frozen: 0 });
  });

  it('cancel before submission releases everything; cancel while running cancels at the provider', async () => {
    const user = await newUser(1000);
    const a = (await submit('c-a', { user_id: user, model: 'img_small', prompts: ['x'] })).json();
    const c = await http.inject({ method: 'POST', url: `/api/v1/image-batches/${a.id}/cancel`, headers: auth });
    expect(c.statusCode).toBe(202);
    expect(await drive(a.id)).toMatchObject({ state: 'cancelled', captured: 0 });
    expect((await http.inject({ method: 'POST', url: `/api/v1/image-batches/${a.id}/cancel`, headers: auth })).statusCode).toBe(409);

    const b = (await submit('c-b', { user_id: user, model: 'img_small', prompts: Array.from({ length: 10 }, (_, i) => `p${i}`) })).json();
    fake.faults.pollsToFinish = 1000;
    const w = svc().worker;
    // Driven until it runs (bounded; the cancel below is asserted either way).
    await waitFor(
      async () => {
        if ((await svc().batches.get(b.id))!.state === 'running') return true;
        await w.tick();
        await w.idle();
        return false;
      },
      { what: 'the batch running', intervalMs: 15, timeoutMs: 5000 },
    ).catch(() => undefined);
    expect((await http.inject({ method: 'POST', url: `/api/v1/image-batches/${b.id}/cancel`, headers: auth })).statusCode).toBe(202);
    const done = await drive(b.id);
    expect(done.state).toBe('cancelled');
    expect(fake.requests.get('POST /v1/batches/:id/cancel')).toBeGreaterThanOrEqual(1);
    expect(done.captured).toBe(done.succeeded * PRICE);
    expect(await money(user)).toEqual({ balance: 1000 - done.captured, frozen: 0 });
  });

  it('money steps are once: a replayed capture or release, or a release after a capture, changes nothing; a capture above the hold is refused', async () => {
    const user = await newUser(100);
    const b = (await submit('m-1', { user_id: user, model: 'img_small', prompts: ['x', 'y'] })).json();
    const t = new BatchTransitions(rt.db);
    await sql.query(`UPDATE image_batches SET state = 'settling', succeeded = 1 WHERE id = $1`, [b.id]);
    await expect(t.finish(null, b.id, ['settling'], 'completed', { step: 'capture', cost: 15 }, 'too much')).rejects.toThrow(/outside 0\.\.14/);
    expect(await money(user)).toEqual({ balance: 86, frozen: 14 });
    expect(await t.finish(null, b.id, ['settling'], 'completed', { step: 'capture', cost: 7 }, 'ok')).not.toBeNull();
    expect(await t.finish(null, b.id, ['settling'], 'completed', { step: 'capture', cost: 7 }, 'replay')).toBeNull();
    // Even with the state forced back (a bug elsewhere), the dedup row refuses a second settlement.
    await sql.query(`UPDATE image_batches SET state = 'settling' WHERE id = $1`, [b.id]);
    expect(await t.finish(null, b.id, ['settling'], 'failed', { step: 'release' }, 'replay')).toBeNull();
    expect(await money(user)).toEqual({ balance: 93, frozen: 0 });
    expect(await settlements(b.id)).toEqual([{ step: 'capture', amount: 7, refunded: 7 }]);
  });

  it("every transition is conditional on the previous state and on the lease: a stale worker's writes are refused after recovery", async () => {
    const user = await newUser(100);
    const b = (await submit('f-1', { user_id: user, model: 'img_small', prompts: ['x'] })).json();
    const t = new BatchTransitions(rt.db);
    const claimed = await svc().queue.claim('dead-worker', 100, 1);
    const l1 = claimed.find((l) => l.batchId === b.id);
    expect(l1).toBeDefined();
    expect(await t.move(l1!, b.id, 'uploading', 'submitted')).toBeNull(); // wrong previous state
    // Its 1 ms lease has run out by the database clock (what recovery judges by).
    await waitFor(async () => (await sql.query(`SELECT locked_until <= clock_timestamp() AS out FROM image_batch_queue WHERE batch_id = $1`, [b.id])).rows[0]?.out === true, {
      what: "the dead worker's lease run out",
      intervalMs: 5,
    });
    expect(await svc().queue.recoverStale()).toBeGreaterThanOrEqual(1);
    expect(await t.move(l1!, b.id, 'created', 'uploading')).toBeNull(); // lease recovered
    expect(await svc().queue.heartbeat(l1!, 1000)).toBe(false);
    const l2 = (await svc().queue.claim('live-worker', 100, 5000)).find((l) => l.batchId === b.id);
    expect(l2!.fence).toBe(l1!.fence + 1);
    expect(await t.move(l1!, b.id, 'created', 'uploading')).toBeNull();
    expect(await t.move(l2!, b.id, 'created', 'uploading')).toMatchObject({ state: 'uploading' });
    expect(await t.finish(l1!, b.id, ['uploading'], 'failed', { step: 'release' }, 'stale')).toBeNull();
    expect(await svc().queue.requeue(l2!, 0)).toBe(true);
    expect((await drive(b.id)).state).toBe('completed');
  });

  it('two workers on one queue never drive the same batch at once and every batch settles once', async () => {
    const user = await newUser(10_000);
    const ids: number[] = [];
    for (let i = 0; i < 12; i++) ids.push((await submit(`two-${i}`, { user_id: user, model: 'img_small', prompts: ['a', 'b'] })).json().id);
    const s = svc();
    const other = new BatchWorker(
      s.batches,
      s.queue,
      (s.worker as unknown as { driver: never }).driver,
      { owner: 'other', concurrency: 4, leaseMs: 2000, claimIntervalMs: 10, retryDelayMs: 10 },
      systemClock,
      rt.metrics.group(ImagesMetrics),
      silentLogger(),
    );
    // Both workers driven until every batch ended (bounded; the assertions below say what is missing).
    await waitFor(
      async () => {
        await Promise.all([s.worker.tick(), other.tick()]);
        await Promise.all([s.worker.idle(), other.idle()]);
        return !Number((await sql.query(`SELECT count(*) FROM image_batches WHERE id = ANY($1) AND state NOT IN ('completed', 'failed', 'cancelled')`, [ids])).rows[0].count);
      },
      { what: 'every batch ended', intervalMs: 10, timeoutMs: 30_000 },
    ).catch(() => undefined);
    const settled = await sql.query(`SELECT batch_id, count(*) AS n FROM image_batch_money WHERE batch_id = ANY($1) AND step <> 'hold' GROUP BY batch_id`, [ids]);
    expect(settled.rows.length).toBe(12);
    expect(settled.rows.every((r) => Number(r.n) === 1)).toBe(true);
    for (const id of ids) expect(fake.createsByOurId.get(String(id))).toBe(1);
    expect(await money(user)).toEqual({ balance: 10_000 - 12 * 2 * PRICE, frozen: 0 });
  });

  it('recovery fails a batch stuck before submission and releases its hold; retention deletes inputs then outputs (state output_deleted)', async () => {
    const user = await newUser(100);
    const stuck = (await submit('st-1', { user_id: user, model: 'img_small', prompts: ['x'] })).json();
    await sql.query(`DELETE FROM image_batch_queue WHERE batch_id = $1`, [stuck.id]); // as if its queue row were lost
    await sql.query(`UPDATE image_batches SET updated_at = clock_timestamp() - interval '1 hour' WHERE id = $1`, [stuck.id]);
    const r = await svc().maintain();
    expect(r.stuck).toBeGreaterThanOrEqual(1);
    expect(await get(stuck.id)).toMatchObject({ state: 'failed', reason: expect.stringMatching(/stuck before submission/) });
    expect(await money(user)).toEqual({ balance: 100, frozen: 0 });

    const b = (await submit('ret-1', { user_id: user, model: 'img_small', prompts: ['x'] })).json();
    const done = await drive(b.id);
    expect(done.state).toBe('completed');
    const store = svc().store;
    await sql.query(`UPDATE image_batches SET ended_at = clock_timestamp() - interval '2 days' WHERE id = $1`, [b.id]);
    await svc().maintain();
    expect(await store.get(`image-batches/${b.id}/input.jsonl`)).toBeNull();
    expect(await store.get(`image-batches/${b.id}/p0-0.png`)).not.toBeNull();
    expect((await get(b.id)).state).toBe('completed');
    await sql.query(`UPDATE image_batches SET ended_at = clock_timestamp() - interval '4 days' WHERE id = $1`, [b.id]);
    await svc().maintain();
    expect(await store.get(`image-batches/${b.id}/p0-0.png`)).toBeNull();
    const after = await get(b.id);
    expect(after.state).toBe('output_deleted');
    expect((await http.inject({ url: done.results[0].urls[0], headers: auth })).statusCode).toBe(404);
    expect(await money(user)).toEqual({ balance: 100 - PRICE, frozen: 0 });
  });

  it('lists batches by user and state, and exports the queue and hold gauges', async () => {
    const user = await newUser(100);
    await submit('l-1', { user_id: user, model: 'img_small', prompts: ['x'] });
    const list = (await http.inject({ url: `/api/v1/image-batches?user_id=${user}&state=created`, headers: auth })).json();
    expect(list.batches).toHaveLength(1);
    expect((await http.inject({ url: `/api/v1/image-batches?state=bogus`, headers: auth })).statusCode).toBe(400);
    await svc().maintain();
    const text = await rt.metrics.registry.metrics();
    expect(text).toMatch(/relay_jobs_image_queue_batches\{status="ready"\} [1-9]/);
    expect(text).toMatch(/relay_jobs_image_holds_open [1-9]/);
    expect(text).not.toContain('sk-image-secret');
  });

  it('a worker whose batch lease is taken while a step runs counts it lost, stops stepping, and its hand-back is refused', async () => {
    const user = await newUser(100);
    await submit('lease-lost-1', { user_id: user, model: 'img_small', prompts: ['x'] });
    const s = svc();
    let entered = 0;
    let held = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    // A step that waits (a slow provider call) while the lease is taken from under it. The worker
    // claims the oldest ready batch: this one, or one an earlier test of the file left ready.
    const slow = {
      step: async (l: { batchId: number }) => {
        held = l.batchId;
        entered++;
        await gate;
        return { kind: 'again' as const, batch: (await s.batches.get(l.batchId))! };
      },
    };
    const w = new BatchWorker(
      s.batches,
      s.queue,
      slow as never,
      { owner: 'slow', concurrency: 1, leaseMs: 600, claimIntervalMs: 3_600_000, retryDelayMs: 10 },
      systemClock,
      rt.metrics.group(ImagesMetrics),
      silentLogger(),
    );
    const lostBefore = (await rt.metrics.group(ImagesMetrics).leasesLost.get()).values[0]?.value ?? 0;
    await w.tick();
    await waitFor(() => entered === 1, { what: 'the step to start' });
    // Another holder takes the row (a newer fence), as stale recovery and a second claim would.
    await sql.query(`UPDATE image_batch_queue SET locked_by = 'thief', fence = fence + 1, locked_until = clock_timestamp() + interval '1 hour' WHERE batch_id = $1`, [held]);
    await waitFor(async () => ((await rt.metrics.group(ImagesMetrics).leasesLost.get()).values[0]?.value ?? 0) > lostBefore, { what: 'the worker to count its lease lost' });
    release();
    await w.idle();
    // One step only: a lost lease hands the batch back instead of stepping again, and the hand-back is refused.
    expect(entered).toBe(1);
    expect((await sql.query(`SELECT status, locked_by FROM image_batch_queue WHERE batch_id = $1`, [held])).rows[0]).toEqual({ status: 'active', locked_by: 'thief' });
    await sql.query(`UPDATE image_batch_queue SET status = 'ready', locked_by = NULL, locked_until = NULL WHERE batch_id = $1`, [held]); // for the file's later tests
  });

  it('a tick claims before the delayed mover and stale recovery run; a batch those make ready is claimed at once, not after the claim interval (issue 26)', async () => {
    const user = await newUser(100);
    const b = (await submit('moved-1', { user_id: user, model: 'img_small', prompts: ['x'] })).json();
    // Delayed and due: only the mover makes it ready.
    await sql.query(`UPDATE image_batch_queue SET status = 'delayed', run_at = clock_timestamp() WHERE batch_id = $1`, [b.id]);
    const s = svc();
    const calls: string[] = [];
    let claims = 0;
    const queue = Object.create(s.queue) as typeof s.queue;
    for (const k of ['moveDue', 'recoverStale'] as const) {
      const f = s.queue[k].bind(s.queue);
      queue[k] = () => (calls.push(k), f());
    }
    queue.claim = async (...a) => {
      calls.push('claim');
      const leases = await s.queue.claim(...a);
      claims += leases.filter((l) => l.batchId === b.id).length;
      return leases;
    };
    const reads: number[] = [];
    const batches = Object.create(s.batches) as typeof s.batches;
    batches.get = (id: number) => (reads.push(id), s.batches.get(id));
    // A claim interval of an hour: only an immediate next tick can claim what the mover made ready.
    const w = new BatchWorker(
      batches,
      queue,
      (s.worker as unknown as { driver: never }).driver,
      { owner: 'moved', concurrency: 2, leaseMs: 2000, claimIntervalMs: 3_600_000, retryDelayMs: 10 },
      systemClock,
      rt.metrics.group(ImagesMetrics),
      silentLogger(),
    );
    w.start();
    try {
      await waitFor(async () => (await s.batches.get(b.id))!.provider_batch_id, { what: 'the moved batch claimed and submitted' });
    } finally {
      await w.stop(Deadline.within(systemClock, 2000));
    }
    expect(calls.slice(0, 3)).toEqual(['claim', 'moveDue', 'recoverStale']);
    // created → uploading → submitted under one claim: the row is read once per claim, then handed on by each step that wrote it.
    expect(claims).toBeGreaterThan(0);
    expect(reads.filter((id) => id === b.id).length).toBe(claims);
    expect((await drive(b.id)).state).toBe('completed');
  });
});

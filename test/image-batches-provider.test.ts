import { beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import type { Runtime } from '../src/app/runtime.js';
import type { FakeImageProvider } from './fixtures/image-provider.js';
import { PRICE, auth, imageBatchesRuntime } from './helpers/image-batches-runtime.js';
import { waitFor } from './helpers/wait.js';

/**
 * Image batches driven through their states against the loopback Batch API and its faults
 * (test/fixtures/image-provider.ts), on real PostgreSQL (test/helpers/image-batches-runtime.ts):
 * the happy path, partial failures, a lost create reply, 5xx, 429 and garbage replies, provider
 * batches that fail or expire, and cancels; each with what is captured and refunded. Submission
 * is in image-batches-submit.test.ts; the queue, leases and settlement guards in
 * image-batches-queue.test.ts.
 */
describe('image batches against the provider', () => {
  const { started, svc, newUser, money, submit, drive, settlements } = imageBatchesRuntime();
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  let fake: FakeImageProvider;
  beforeAll(() => {
    ({ sql, rt, http, fake } = started());
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
});

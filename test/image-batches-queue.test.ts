import { beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import type { Runtime } from '../src/app/runtime.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { BatchWorker } from '../src/areas/images/batch-worker.js';
import { BatchTransitions } from '../src/areas/images/store/image-transitions.js';
import type { FakeImageProvider } from './fixtures/image-provider.js';
import { PRICE, auth, imageBatchesRuntime } from './helpers/image-batches-runtime.js';
import { waitFor } from './helpers/wait.js';
import { ImagesMetrics } from '../src/areas/images/metrics.js';
import { Deadline } from '../src/time/deadline.js';

/**
 * The image batch queue and state machine on real PostgreSQL, against the loopback Batch API
 * (test/helpers/image-batches-runtime.ts): money steps settle once, every transition is
 * conditional on the previous state and the lease (fenced against a stale worker), two workers
 * on one queue, recovery of stuck batches and output retention, a lease lost mid-step, and the
 * order of a worker's tick. Submission is in image-batches-submit.test.ts; batches against the
 * provider's faults in image-batches-provider.test.ts.
 */
describe('image batches: queue, leases and settlement', () => {
  const { started, svc, newUser, money, submit, get, drive, settlements } = imageBatchesRuntime();
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  let fake: FakeImageProvider;
  beforeAll(() => {
    ({ sql, rt, http, fake } = started());
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

import { describe, expect, it } from 'vitest';
import { WorkerPool } from '../src/workers/worker-pool.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { systemClock } from '../src/time/clock.js';
import { Deadline } from '../src/time/deadline.js';

function gate() {
  let open!: () => void;
  const p = new Promise<void>((r) => (open = r));
  return { p, open };
}

describe('WorkerPool', () => {
  it('runs at most `concurrency` tasks and queues up to the limit, FIFO', async () => {
    const g = gate();
    const order: number[] = [];
    let peak = 0;
    let active = 0;
    const pool = new WorkerPool<number>(
      async (n) => {
        active++;
        peak = Math.max(peak, active);
        await g.p;
        order.push(n);
        active--;
      },
      { name: 't', concurrency: 2, queueLimit: 3 },
    );
    for (let i = 0; i < 5; i++) expect(await pool.submit(i)).toBe('enqueued');
    expect(pool.stats).toMatchObject({ running: 2, waiting: 3 });
    g.open();
    expect(await pool.stopAndWait(Deadline.within(systemClock, 1000))).toEqual({ drained: true, remaining: 0 });
    expect(peak).toBe(2);
    expect(order).toEqual([0, 1, 2, 3, 4]);
    expect(pool.stats.completed).toBe(5);
  });

  it('falls back to running in the caller when full (sync policy, the default) and counts it', async () => {
    const g = gate();
    const done: number[] = [];
    const metrics = new Metrics();
    const pool = new WorkerPool<number>(
      async (n) => {
        if (n < 2) await g.p;
        done.push(n);
      },
      { name: 'usage', concurrency: 1, queueLimit: 1, metrics },
    );
    await pool.submit(0);
    await pool.submit(1);
    expect(await pool.submit(2)).toBe('sync_fallback');
    expect(done).toEqual([2]); // ran inline, before the queued ones
    expect(pool.stats.syncFallback).toBe(1);
    expect(await metrics.registry.getSingleMetricAsString('relay_jobs_pool_sync_fallback_total')).toContain('pool="usage"} 1');
    g.open();
    await pool.stopAndWait(Deadline.within(systemClock, 1000));
    expect(done.sort()).toEqual([0, 1, 2]);
  });

  it('drops and counts under the drop policy', async () => {
    const g = gate();
    const pool = new WorkerPool<number>(async () => g.p, { name: 't', concurrency: 1, queueLimit: 0, overflow: 'drop' });
    await pool.submit(0);
    expect(await pool.submit(1)).toBe('dropped');
    expect(pool.stats.dropped).toBe(1);
    g.open();
    await pool.stopAndWait(Deadline.within(systemClock, 1000));
  });

  it('after stop, never queues and never drops: the caller runs the task', async () => {
    const seen: number[] = [];
    const pool = new WorkerPool<number>(async (n) => void seen.push(n), { name: 't', concurrency: 1, queueLimit: 10, overflow: 'drop' });
    pool.stop();
    expect(await pool.submit(7)).toBe('sync_fallback');
    expect(seen).toEqual([7]);
  });

  it('stopAndWait reports what is left at the deadline and aborts running tasks', async () => {
    let aborted = false;
    const pool = new WorkerPool<number>(
      (_n, signal) =>
        new Promise<void>((resolve) => {
          signal.addEventListener('abort', () => {
            aborted = true;
            resolve();
          });
        }),
      { name: 't', concurrency: 1, queueLimit: 5 },
    );
    await pool.submit(1);
    await pool.submit(2);
    const r = await pool.stopAndWait(Deadline.within(systemClock, 50));
    expect(r).toEqual({ drained: false, remaining: 2 });
    expect(aborted).toBe(true);
  });

  it('counts failed tasks and keeps going', async () => {
    const errors: unknown[] = [];
    const pool = new WorkerPool<number>(
      async (n) => {
        if (n === 1) throw new Error('bad');
      },
      { name: 't', concurrency: 1, queueLimit: 5, onError: (e) => errors.push(e) },
    );
    for (const n of [0, 1, 2]) await pool.submit(n);
    await pool.stopAndWait(Deadline.within(systemClock, 1000));
    expect(pool.stats).toMatchObject({ completed: 2, failed: 1 });
    expect(errors).toHaveLength(1);
  });
});

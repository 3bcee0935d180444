import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/time/clock.js';
import { backoffMs, retry } from '../src/time/retry.js';

describe('retry', () => {
  it('backs off exponentially up to the cap, jitter only shortening the wait', () => {
    const p = { baseMs: 100, maxMs: 1000 };
    expect([1, 2, 3, 4, 5, 6].map((a) => backoffMs(a, p))).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect(backoffMs(3, { ...p, jitter: 0.5, random: () => 1 })).toBe(200);
    expect(backoffMs(3, { ...p, jitter: 0.5, random: () => 0 })).toBe(400);
  });

  it('retries until success, waiting on the injected clock', async () => {
    const clock = new ManualClock(0);
    const waits: number[] = [];
    let calls = 0;
    const done = retry(
      async () => {
        if (++calls < 4) throw new Error(`fail ${calls}`);
        return 'ok';
      },
      { baseMs: 10, maxMs: 1000, clock, onRetry: (_e, _a, w) => waits.push(w) },
    );
    for (let i = 0; i < 3; i++) await clock.advance(1000);
    await expect(done).resolves.toBe('ok');
    expect(calls).toBe(4);
    expect(waits).toEqual([10, 20, 40]);
  });

  it('stops at the attempt limit, at the deadline, on abort, and when retryIf refuses, throwing the last error', async () => {
    const clock = new ManualClock(0);
    const failing = (n: { calls: number }) => async () => {
      n.calls++;
      throw new Error(`fail ${n.calls}`);
    };
    const a = { calls: 0 };
    const pa = expect(retry(failing(a), { baseMs: 10, maxMs: 10, attempts: 3, clock })).rejects.toThrow('fail 3');
    for (let i = 0; i < 3; i++) await clock.advance(10);
    await pa;
    expect(a.calls).toBe(3);

    const b = { calls: 0 };
    await expect(retry(failing(b), { baseMs: 100, maxMs: 100, clock, deadline: () => clock.now() + 50 })).rejects.toThrow('fail 1');

    const c = { calls: 0 };
    const ctl = new AbortController();
    const pc = expect(retry(failing(c), { baseMs: 100, maxMs: 100, clock, signal: ctl.signal })).rejects.toThrow('fail 1');
    await clock.advance(0);
    ctl.abort();
    await pc;

    const d = { calls: 0 };
    await expect(retry(failing(d), { baseMs: 1, maxMs: 1, clock, retryIf: () => false })).rejects.toThrow('fail 1');
    expect(d.calls).toBe(1);
  });
});

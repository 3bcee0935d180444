import { describe, expect, it } from 'vitest';
import { ClaimRunner, type ClaimPass } from '../src/workers/claim-runner.js';
import { ManualClock, settle } from '../src/time/clock.js';
import { Deadline } from '../src/time/deadline.js';
import { silentLogger } from '../src/telemetry/logger.js';

/** A claim runner over an in-memory queue of numbers; each item runs until the test finishes it. */
function setup(o: { capacity: number; batch?: number; pollMs?: number } = { capacity: 3 }) {
  const clock = new ManualClock();
  const queue: number[] = [];
  const asked: number[] = [];
  const passes: ClaimPass[] = [];
  const running = new Map<number, { finish: () => void; signal: AbortSignal }>();
  const runner = new ClaimRunner<number>({
    name: 'test_claims',
    clock,
    log: silentLogger(),
    capacity: o.capacity,
    batch: o.batch,
    pollMs: o.pollMs ?? 1000,
    claim: async (n) => {
      asked.push(n);
      return queue.splice(0, n);
    },
    work: (item, signal) =>
      new Promise<void>((resolve) => {
        running.set(item, { signal, finish: () => (running.delete(item), resolve()) });
      }),
    pace: (p) => (passes.push(p), p.claimed > 0 ? 'poll' : 'idle'),
  });
  return { clock, queue, asked, passes, running, runner };
}

describe('ClaimRunner', () => {
  it('claims at most the free slots, capped by the batch; a full runner does not claim', async () => {
    const s = setup({ capacity: 3, batch: 2 });
    s.queue.push(1, 2, 3, 4, 5);
    s.runner.start();
    await settle();
    expect(s.asked).toEqual([2]);
    expect([...s.running.keys()]).toEqual([1, 2]);
    await s.clock.advance(1000);
    expect(s.asked).toEqual([2, 1]); // one slot left
    expect(s.runner.inHand).toBe(3);
    await s.clock.advance(1000);
    expect(s.asked).toEqual([2, 1]); // full: no claim at all
    expect(s.passes.at(-1)).toMatchObject({ claimed: 0, wanted: 0, room: 0 });
    s.running.get(1)!.finish();
    await s.clock.advance(1000);
    expect(s.asked).toEqual([2, 1, 1]);
    expect([...s.running.keys()].sort()).toEqual([2, 3, 4]);
    for (const r of [...s.running.values()]) r.finish();
    await s.runner.idle();
    expect(await s.runner.stop(Deadline.within(s.clock, 1000))).toBe(0);
  });

  it('a stop shares one deadline between the loop and the items, then aborts what is still running', async () => {
    const s = setup({ capacity: 2 });
    s.queue.push(1, 2);
    s.runner.start();
    await settle();
    expect(s.runner.inHand).toBe(2);
    const stopping = s.runner.stop(Deadline.within(s.clock, 500));
    await s.clock.advance(300);
    s.running.get(1)!.finish();
    await s.clock.advance(199);
    let done = false;
    void stopping.then(() => (done = true));
    await settle();
    expect(done).toBe(false);
    await s.clock.advance(1);
    expect(await stopping).toBe(1);
    expect(s.running.get(2)!.signal.aborted).toBe(true);
    expect(s.clock.pending).toBe(0);
  });

  it('starts again after a stop and claims again', async () => {
    const s = setup({ capacity: 2 });
    s.runner.start();
    await settle();
    expect(s.asked).toEqual([2]);
    expect(await s.runner.stop(Deadline.within(s.clock, 100))).toBe(0);
    s.queue.push(7);
    s.runner.start();
    await settle();
    expect(s.asked).toEqual([2, 2]);
    expect([...s.running.keys()]).toEqual([7]);
    expect(s.running.get(7)!.signal.aborted).toBe(false);
    s.running.get(7)!.finish();
    expect(await s.runner.stop(Deadline.within(s.clock, 100))).toBe(0);
  });
});

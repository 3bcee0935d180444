import { describe, expect, it } from 'vitest';
import { ServiceLoop, type TickResult } from '../src/workers/service-loop.js';
import { loopBook } from '../src/workers/loop-book.js';
import { ManualClock, settle } from '../src/time/clock.js';
import { Deadline } from '../src/time/deadline.js';
import { silentLogger } from '../src/telemetry/logger.js';

/** A loop on a manual clock whose ticks are recorded (ms since t0) and may be held open by the test. */
function setup(backstopMs = 10_000) {
  const clock = new ManualClock();
  const t0 = clock.now();
  const at: number[] = [];
  const ticks = { inc: () => undefined };
  let hold: Promise<void> | null = null;
  let inTick = 0;
  let overlapped = false;
  const loop = new ServiceLoop({
    name: 'restart_loop',
    clock,
    log: silentLogger(),
    backstopMs,
    ticks,
    tick: async (): Promise<TickResult> => {
      if (++inTick > 1) overlapped = true;
      at.push(clock.now() - t0);
      try {
        if (hold) await hold;
        return { items: 0 };
      } finally {
        inTick--;
      }
    },
  });
  return {
    clock,
    loop,
    at,
    book: loopBook(ticks),
    overlapped: () => overlapped,
    /** Ticks from here on wait until the returned function is called. */
    holdTicks(): () => void {
      let open!: () => void;
      hold = new Promise<void>((r) => (open = r));
      return () => {
        hold = null;
        open();
      };
    },
  };
}

describe('ServiceLoop restart and deadlines', () => {
  it('starts again after a stop: ticks resume on the clock and wake-ups work again', async () => {
    const s = setup();
    s.loop.start();
    await s.clock.advance(10_000);
    expect(s.at).toEqual([0, 10_000]);

    expect(await s.loop.stop(Deadline.within(s.clock, 1000))).toBe(0);
    expect(s.loop.isRunning).toBe(false);
    await s.clock.advance(30_000);
    s.loop.wake('while stopped');
    await s.clock.advance(0);
    expect(s.at).toEqual([0, 10_000]);
    expect(s.book.report(s.clock.now())).toEqual([]);

    s.loop.start();
    await settle();
    expect(s.loop.isRunning).toBe(true);
    expect(s.at).toEqual([0, 10_000, 40_000]);
    await s.clock.advance(10_000);
    expect(s.at).toEqual([0, 10_000, 40_000, 50_000]);
    s.loop.wake('after restart');
    await s.clock.advance(0);
    expect(s.at).toEqual([0, 10_000, 40_000, 50_000, 50_000]);
    expect(s.book.report(s.clock.now()).map((r) => r.loop)).toEqual(['restart_loop']);

    expect(await s.loop.stop(Deadline.within(s.clock, 1000))).toBe(0);
    await s.loop.stopped();
    expect(s.book.report(s.clock.now())).toEqual([]);
    expect(s.clock.pending).toBe(0);
  });

  it('a restart while the stopped tick still runs waits for it: ticks never overlap', async () => {
    const s = setup();
    const release = s.holdTicks();
    s.loop.start();
    await settle();
    expect(s.at).toEqual([0]);
    const stopping = s.loop.stop(Deadline.within(s.clock, 500));
    await s.clock.advance(500);
    expect(await stopping).toBe(1);

    s.loop.start();
    await s.clock.advance(1000);
    expect(s.at).toEqual([0]); // the new run has not ticked: the old tick is still in flight
    release();
    await settle();
    expect(s.at).toEqual([0, 1500]);
    expect(s.overlapped()).toBe(false);
    // The old run ended after the restart: the loop stays in the book while the new run lives.
    expect(s.book.report(s.clock.now()).map((r) => r.loop)).toEqual(['restart_loop']);
    expect(await s.loop.stop(Deadline.within(s.clock, 100))).toBe(0);
  });

  it('a stop with a deadline already passed returns at once, without a timer, and still stops the loop', async () => {
    const s = setup();
    s.holdTicks();
    s.loop.start();
    await settle();
    const pendingBefore = s.clock.pending;
    // The tick never ends and the clock never moves: the stop must not wait for either.
    const left = await s.loop.stop(Deadline.at(s.clock, s.clock.now() - 1));
    expect(left).toBe(1);
    expect(s.clock.pending).toBe(pendingBefore);
    expect(s.loop.isRunning).toBe(false);

    // Sleeping (no tick in flight), a passed deadline reports nothing left.
    const idle = setup();
    idle.loop.start();
    await idle.clock.advance(1);
    expect(await idle.loop.stop(Deadline.within(idle.clock, 0))).toBe(0);
    await idle.loop.stopped();
    expect(idle.clock.pending).toBe(0);
  });

  it('one deadline is one budget: the second step of a stop gets what the first left', async () => {
    const clock = new ManualClock();
    const deadline = Deadline.within(clock, 1000);
    await clock.advance(700);
    expect(deadline.leftMs()).toBe(300);
    const never = new Promise<void>(() => undefined);
    const waited = deadline.settled(never);
    await clock.advance(299);
    let done = false;
    void waited.then(() => (done = true));
    await settle();
    expect(done).toBe(false);
    await clock.advance(1);
    expect(await waited).toBe(false);
    expect(deadline.passed).toBe(true);
    expect(await deadline.settled(Promise.resolve())).toBe(false);
    expect(clock.pending).toBe(0);
  });
});

import { describe, expect, it, vi } from 'vitest';
import { ServiceLoop, type TickResult } from '../src/workers/service-loop.js';
import { ManualClock, settle, systemClock, type Clock } from '../src/time/clock.js';
import { delay, timeout } from '../src/time/wall.js';
import { waitFor } from './helpers/wait.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { Deadline } from '../src/time/deadline.js';

function setup(tick: (signal: AbortSignal, n: number) => Promise<TickResult>, backstopMs = 30_000, wakeSpacingMs?: number) {
  const clock = new ManualClock();
  const at: number[] = [];
  const outcomes: string[] = [];
  const loop = new ServiceLoop({
    name: 'test_loop',
    clock,
    log: silentLogger(),
    backstopMs,
    errorDelayMs: 1000,
    wakeSpacingMs,
    ticks: { inc: (l) => outcomes.push(l.outcome) },
    tick: (signal) => {
      at.push(clock.now() - t0);
      return tick(signal, at.length);
    },
  });
  const t0 = clock.now();
  return { clock, loop, at, outcomes, t0 };
}

describe('ServiceLoop', () => {
  it('ticks at start, then sleeps until the backstop when there is nothing due', async () => {
    const s = setup(async () => ({ items: 0 }));
    s.loop.start();
    await s.clock.advance(29_999);
    expect(s.at).toEqual([0]);
    await s.clock.advance(1);
    expect(s.at).toEqual([0, 30_000]);
    expect(s.outcomes).toEqual(['no_work', 'no_work']);
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });

  it('sleeps until the next due time the tick computed when it is before the backstop', async () => {
    const s = setup(async () => ({ items: 1, nextDueAt: s.clock.now() + 5000 }));
    s.loop.start();
    await s.clock.advance(10_000);
    expect(s.at).toEqual([0, 5000, 10_000]);
    expect(s.outcomes[0]).toBe('ok');
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });

  it('a due time in the past means tick again at once', async () => {
    const s = setup(async (_sig, n) => ({ items: 1, nextDueAt: n < 3 ? 0 : null }));
    s.loop.start();
    await s.clock.advance(0);
    expect(s.at).toEqual([0, 0, 0]);
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });

  it('wake() cuts the sleep short', async () => {
    const s = setup(async () => ({ items: 0 }));
    s.loop.start();
    await s.clock.advance(1000);
    s.loop.wake('test');
    await s.clock.advance(0);
    expect(s.at).toEqual([0, 1000]);
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });

  it('wake-ups during a tick coalesce into exactly one more tick', async () => {
    let release: () => void = () => undefined;
    const s = setup((_sig, n) => (n === 2 ? new Promise<TickResult>((r) => (release = () => r({ items: 1 }))) : Promise.resolve({ items: 0 })));
    s.loop.start();
    await s.clock.advance(100);
    s.loop.wake('a');
    await settle();
    expect(s.loop.inTick).toBe(true);
    for (let i = 0; i < 5; i++) s.loop.wake(`b${i}`);
    release();
    await s.clock.advance(0);
    // tick 1 at start, tick 2 woken, tick 3 for the five wake-ups during tick 2; then asleep
    expect(s.at).toEqual([0, 100, 100]);
    await s.clock.advance(1000);
    expect(s.at.length).toBe(3);
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });

  it('with wakeSpacingMs, a lone wake-up ticks at once; wake-ups right after a tick run one tick that long after its start; one during a tick still follows it at once', async () => {
    let release: () => void = () => undefined;
    const s = setup((_sig, n) => (n === 4 ? new Promise<TickResult>((r) => (release = () => r({ items: 1 }))) : Promise.resolve({ items: 0 })), 30_000, 20);
    s.loop.start();
    await s.clock.advance(1000);
    s.loop.wake('lone'); // the last tick started a second ago: at once
    await s.clock.advance(0);
    expect(s.at).toEqual([0, 1000]);
    await s.clock.advance(5);
    s.loop.wake('a'); // 5 ms after a tick's start: 15 ms more
    await s.clock.advance(10);
    s.loop.wake('b'); // inside the same spacing: the same tick
    await s.clock.advance(4);
    expect(s.at).toEqual([0, 1000]);
    await s.clock.advance(1);
    expect(s.at).toEqual([0, 1000, 1020]);
    // A burst right after that tick: one tick for all of it, running when one more comes.
    for (let i = 0; i < 5; i++) s.loop.wake(`c${i}`);
    await s.clock.advance(20);
    expect(s.at).toEqual([0, 1000, 1020, 1040]);
    expect(s.loop.inTick).toBe(true);
    s.loop.wake('d');
    release();
    await s.clock.advance(0);
    expect(s.at).toEqual([0, 1000, 1020, 1040, 1040]);
    await s.clock.advance(1000);
    expect(s.at.length).toBe(5);
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });

  it('with wakeSpacingMs, a wall clock stepped back an hour does not hold a wake-up: it ticks at once', async () => {
    const manual = new ManualClock();
    let back = 0;
    const clock: Clock = { now: () => manual.now() - back, setTimeout: (fn, ms) => manual.setTimeout(fn, ms), clearTimeout: (h) => manual.clearTimeout(h) };
    const at: number[] = [];
    const loop = new ServiceLoop({ name: 'stepped', clock, log: silentLogger(), backstopMs: 30_000, wakeSpacingMs: 20, tick: async () => (at.push(manual.now()), { items: 0 }) });
    const t0 = manual.now();
    loop.start();
    await manual.advance(1000);
    back = 3_600_000; // NTP steps the wall clock back: the last tick's start is now an hour ahead
    loop.wake('after the step');
    await manual.advance(0);
    expect(at.map((t) => t - t0)).toEqual([0, 1000]);
    await loop.stop(Deadline.within(manual, 1000));
  });

  it('a failed tick is counted and retried after the error delay', async () => {
    const s = setup(async (_sig, n) => {
      if (n === 1) throw new Error('boom');
      return { items: 0 };
    });
    s.loop.start();
    await s.clock.advance(999);
    expect(s.at).toEqual([0]);
    await s.clock.advance(1);
    expect(s.at).toEqual([0, 1000]);
    expect(s.outcomes).toEqual(['failed', 'no_work']);
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });

  it('stop aborts the running tick and reports it left undone when it does not end in time', async () => {
    let sawAbort = false;
    const s = setup(
      (signal) =>
        new Promise<TickResult>(() => {
          signal.addEventListener('abort', () => (sawAbort = true));
        }),
    );
    s.loop.start();
    await settle();
    const stopping = s.loop.stop(Deadline.within(s.clock, 500));
    await s.clock.advance(500);
    expect(await stopping).toBe(1);
    expect(sawAbort).toBe(true);
  });

  it('stop returns 0 when the tick ends on abort, and no tick runs after', async () => {
    const s = setup(
      (signal) =>
        new Promise<TickResult>((resolve) => {
          signal.addEventListener('abort', () => resolve({ items: 0 }));
        }),
    );
    s.loop.start();
    await settle();
    expect(await s.loop.stop(Deadline.within(s.clock, 500))).toBe(0);
    s.loop.wake('late');
    await s.clock.advance(60_000);
    expect(s.at).toEqual([0]);
    expect(s.clock.pending).toBe(0);
  });

  it('the backstop can be read at every sleep (a config reload)', async () => {
    let backstop = 10_000;
    const s = setup(async () => ({ items: 0 }));
    const loop = new ServiceLoop({ name: 'b', clock: s.clock, log: silentLogger(), backstopMs: () => backstop, tick: async () => (s.at.push(s.clock.now() - s.t0), { items: 0 }) });
    loop.start();
    await s.clock.advance(5000);
    backstop = 2000;
    await s.clock.advance(7000);
    expect(s.at).toEqual([0, 10_000, 12_000]);
    await loop.stop(Deadline.within(s.clock, 100));
  });

  it('with no backstop (Infinity) and nothing due it sleeps on no timer until woken', async () => {
    const s = setup(async () => ({ items: 0 }), Infinity);
    s.loop.start();
    await s.clock.advance(0);
    expect(s.clock.pending).toBe(0);
    await s.clock.advance(86_400_000);
    expect(s.at).toEqual([0]);
    s.loop.wake('work');
    await s.clock.advance(0);
    expect(s.at).toEqual([0, 86_400_000]);
    expect(await s.loop.stop(Deadline.within(s.clock, 100))).toBe(0);
  });

  it('dueAt shortens the sleep on the clock timer; nothing runs before that time; a later one changes nothing', async () => {
    const s = setup(async () => ({ items: 0 }), Infinity);
    s.loop.start();
    await s.clock.advance(1000);
    s.loop.dueAt(s.t0 + 5000);
    s.loop.dueAt(s.t0 + 9000);
    expect(s.clock.pending).toBe(1);
    await s.clock.advance(3999);
    expect(s.at).toEqual([0]);
    await s.clock.advance(1);
    expect(s.at).toEqual([0, 5000]);
    await s.clock.advance(10_000);
    expect(s.at).toEqual([0, 5000]);
    expect(await s.loop.stop(Deadline.within(s.clock, 100))).toBe(0);
  });
});

describe('waits longer than Node keeps a timer (2^31-1 ms, about 24.8 days)', () => {
  it('a loop on the system clock with a 30-day backstop ticks once and sleeps: no 1 ms spin, no TimeoutOverflowWarning', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    let ticks = 0;
    const loop = new ServiceLoop({ name: 'long_backstop', clock: systemClock, log: silentLogger(), backstopMs: 30 * 86_400_000, errorDelayMs: 1000, tick: async () => (ticks++, { items: 0 }) });
    try {
      loop.start();
      await waitFor(() => ticks >= 1, { what: 'the first tick' });
      // Node fires an overflowing timer after 1 ms: a spinning loop would tick hundreds of times in this wait.
      await delay(300);
      expect(ticks).toBe(1);
    } finally {
      await loop.stop(Deadline.within(systemClock, 5000));
      process.off('warning', onWarning);
    }
    expect(warnings.filter((w) => w.startsWith('TimeoutOverflowWarning'))).toEqual([]);
  });

  it('a chained wait fires once, at its full length; cancelled, it never fires', () => {
    vi.useFakeTimers();
    try {
      const fired: string[] = [];
      const long = 2 ** 31 + 5000;
      timeout(() => fired.push('wall'), long);
      systemClock.setTimeout(() => fired.push('clock'), long);
      systemClock.clearTimeout(systemClock.setTimeout(() => fired.push('cancelled'), long));
      const cancel = timeout(() => fired.push('cancelled wall'), long);
      vi.advanceTimersByTime(2 ** 31 - 1);
      cancel();
      expect(fired).toEqual([]);
      vi.advanceTimersByTime(5000);
      expect(fired).toEqual([]);
      vi.advanceTimersByTime(1);
      expect(fired.sort()).toEqual(['clock', 'wall']);
      vi.advanceTimersByTime(10 * 2 ** 31);
      expect(fired).toHaveLength(2);
    } finally {
      vi.useRealTimers();
    }
  });
});

import { systemClock, type Clock, type TimerHandle } from '../../src/time/clock.js';

/**
 * Real time that a test can also move forward: `now()` is the wall clock plus an offset that
 * `advance` grows, and timers are real. For a runtime a test drives by hand (`runNow`) whose jobs
 * read the injected clock: the test steps past a cron occurrence or a window instead of sleeping
 * through it, while everything that runs on real timers (leases, heartbeats, I/O) keeps running.
 * Unlike `ManualClock` nothing stands still, so a runtime built on it needs no one to fire its
 * timers. The offset only grows: the clock never runs backwards.
 */
export class SteppedClock implements Clock {
  private offset = 0;

  now(): number {
    return Date.now() + this.offset;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    return systemClock.setTimeout(fn, ms);
  }

  clearTimeout(handle: TimerHandle): void {
    systemClock.clearTimeout(handle);
  }

  /** Moves this clock `ms` ahead of the wall clock (in addition to any earlier step). */
  advance(ms: number): void {
    if (ms < 0) throw new Error(`SteppedClock.advance(${ms}): a clock never runs backwards`);
    this.offset += ms;
  }
}

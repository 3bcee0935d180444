import type { Clock, TimerHandle } from './clock.js';

/**
 * An absolute point in time on a clock: the one budget a stop shares among its steps. A stop
 * that waits for its loop, then its work in hand, then a final write passes the same deadline to
 * each step, so the steps together end by it (a budget in milliseconds handed to each step in turn
 * was spent once per step). Made once where a budget enters: the shutdown ladder makes one for the
 * whole shutdown (`shutdown.grace`) and hands it to every rung, which passes it down unchanged.
 */
export class Deadline {
  private constructor(
    private readonly clock: Clock,
    /** Epoch ms on `clock`. */
    readonly at: number,
  ) {}

  /** The deadline at epoch ms `at` on `clock`. */
  static at(clock: Clock, at: number): Deadline {
    return new Deadline(clock, at);
  }

  /** The deadline `ms` from now on `clock` (a negative or NaN budget is a deadline already reached). */
  static within(clock: Clock, ms: number): Deadline {
    return new Deadline(clock, clock.now() + (ms > 0 ? ms : 0));
  }

  /** A deadline already reached, known without reading the clock (a stop that must not wait at all). */
  static reached(clock: Clock): Deadline {
    return new Deadline(clock, -Infinity);
  }

  /** Milliseconds left, 0 once passed. */
  leftMs(): number {
    return this.at === -Infinity ? 0 : Math.max(0, this.at - this.clock.now());
  }

  get passed(): boolean {
    return this.at === -Infinity || this.clock.now() >= this.at;
  }

  /**
   * This deadline, or `ms` from now when that is later: a step that must get its floor (the final
   * usage flush's `minMs`) even when earlier steps used the budget up.
   */
  atLeast(ms: number): Deadline {
    const floor = this.clock.now() + (ms > 0 ? ms : 0);
    return floor > this.at ? new Deadline(this.clock, floor) : this;
  }

  /** A deadline `ms` earlier on the same clock: a step that must leave time for the one after it. */
  less(ms: number): Deadline {
    return new Deadline(this.clock, this.at - ms);
  }

  /**
   * Waits for `work` until the deadline, on the deadline's clock; true when it settled (resolved
   * or rejected) in time. A deadline already passed waits not at all (false). The timer is cleared
   * either way, so a stop that used it leaves nothing behind.
   */
  async settled(work: Promise<unknown>): Promise<boolean> {
    const done = work.then(
      () => true,
      () => true,
    );
    if (this.passed) return false;
    let timer: TimerHandle | null = null;
    const late = new Promise<false>((resolve) => (timer = this.clock.setTimeout(() => resolve(false), this.leftMs())));
    try {
      return await Promise.race([done, late]);
    } finally {
      if (timer) this.clock.clearTimeout(timer);
    }
  }
}

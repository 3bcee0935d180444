import { sleep, type Clock } from '../time/clock.js';

/**
 * A token bucket: `perSecond` permits a second with a burst of the same size. `take` waits for
 * a permit in arrival order, so thousands of accounts due at once reach an endpoint at a steady rate.
 */
export class RateLimiter {
  private tokens: number;
  private last: number;
  private tail: Promise<void> = Promise.resolve();

  constructor(
    private readonly clock: Clock,
    private readonly perSecond: number,
  ) {
    this.tokens = Math.max(1, perSecond);
    this.last = clock.now();
  }

  take(signal?: AbortSignal): Promise<void> {
    const turn = this.tail.then(() => this.wait(signal));
    this.tail = turn.catch(() => undefined);
    return turn;
  }

  private async wait(signal?: AbortSignal): Promise<void> {
    for (;;) {
      signal?.throwIfAborted();
      const now = this.clock.now();
      this.tokens = Math.min(Math.max(1, this.perSecond), this.tokens + ((now - this.last) / 1000) * this.perSecond);
      this.last = now;
      if (this.tokens >= 1) {
        this.tokens -= 1;
        return;
      }
      await sleep(this.clock, Math.ceil(((1 - this.tokens) / this.perSecond) * 1000), signal);
    }
  }
}

/**
 * Time as a dependency. Production uses `systemClock`; tests use `ManualClock` and move time
 * by hand, so schedules, leases and health judgements are tested fast and deterministically.
 */
import { timeout, timerMs } from './wall.js';

export type TimerHandle = { readonly id: number };

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** Randomness as a dependency (jitter): returns a number in [0, 1). */
export type Random = () => number;

let nextId = 1;

export const systemClock: Clock = {
  now: () => Date.now(),
  // wall.ts's timer: a wait past Node's longest timer (about 24.8 days) is chained, never a 1 ms spin.
  setTimeout: (fn, ms) => ({ id: nextId++, cancel: timeout(fn, ms) }) as TimerHandle,
  clearTimeout(handle) {
    (handle as unknown as { cancel: () => void }).cancel();
  },
};

/** Resolves after `ms` on `clock`, or early when `signal` aborts; true when the full time passed. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clock.clearTimeout(handle);
      resolve(false);
    };
    const handle = clock.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

interface ManualTimer {
  id: number;
  at: number;
  fn: () => void;
}

/** A clock that only moves when told to. Timers fire in time order, letting promises settle between them. */
export class ManualClock implements Clock {
  private timers: ManualTimer[] = [];

  constructor(private current = Date.UTC(2026, 0, 1)) {}

  now(): number {
    return this.current;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const timer = { id: nextId++, at: this.current + Math.max(0, ms), fn };
    this.timers.push(timer);
    return { id: timer.id };
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers = this.timers.filter((t) => t.id !== handle.id);
  }

  get pending(): number {
    return this.timers.length;
  }

  /** Moves time forward by `ms`, firing every timer that falls due on the way. */
  async advance(ms: number): Promise<void> {
    const target = this.current + ms;
    await settle();
    for (;;) {
      const due = this.timers.filter((t) => t.at <= target).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (!due) break;
      this.timers = this.timers.filter((t) => t !== due);
      this.current = Math.max(this.current, due.at);
      due.fn();
      await settle();
    }
    this.current = target;
    await settle();
  }
}

/** Lets pending promise chains (including real I/O callbacks already queued) run. */
export async function settle(rounds = 5): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setImmediate(r));
}

/**
 * Waits for `work` for at most `ms` of wall time; true when it settled in time. The timer is
 * cleared either way, so a shutdown that used it leaves nothing behind (no timer may outlive it).
 */
export async function settledWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), timerMs(ms))));
  try {
    return await Promise.race([
      work.then(
        () => true,
        () => true,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** `p`, or a rejection (with `message`) when it has not settled within `ms` of wall time (readiness probes, doctor checks, a connect). */
export function withTimeout<T>(p: Promise<T>, ms: number, message = `no answer within ${ms}ms`): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(message)), timerMs(ms));
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

/**
 * Real time, on purpose. Everything a test needs to move takes the injected `Clock`; these are for
 * what must keep real time whatever clock is injected: a socket's or a child process's deadline, a
 * process watchdog, a CLI waiting between polls, a duration measured for a metric. Only src/time/
 * may call `setTimeout`, `setInterval` or `performance.now` (`npm run lint`); the rest of src/ uses
 * the clock or, naming the choice, this module.
 */

/** Cancels what `timeout` or `interval` started; calling it twice is harmless. */
export type Cancel = () => void;

export interface WallTimerOptions {
  /** The timer alone does not keep the process alive (a watchdog, an idle release). */
  unref?: boolean;
}

/**
 * Node's longest timer (2^31-1 ms, about 24.8 days): a longer one fires after 1 ms, with a
 * TimeoutOverflowWarning, so a loop armed for 30 days would spin. Longer waits are chained.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** `ms` as a delay Node's timers keep (0 to MAX_TIMER_MS): for one leg of a chained wait, or a wait that only bounds something else. */
export function timerMs(ms: number): number {
  return Math.min(MAX_TIMER_MS, Math.max(0, ms));
}

/** Calls `fn` once after `ms` of real time, unless cancelled first. */
export function timeout(fn: () => void, ms: number, opts: WallTimerOptions = {}): Cancel {
  let t: NodeJS.Timeout;
  const arm = (left: number) => {
    t = setTimeout(left > MAX_TIMER_MS ? () => arm(left - MAX_TIMER_MS) : fn, timerMs(left));
    if (opts.unref) t.unref();
  };
  arm(ms);
  return () => clearTimeout(t);
}

/** Calls `fn` every `ms` of real time until cancelled (at most every MAX_TIMER_MS). */
export function interval(fn: () => void, ms: number, opts: WallTimerOptions = {}): Cancel {
  const t = setInterval(fn, Math.max(1, timerMs(ms)));
  if (opts.unref) t.unref();
  return () => clearInterval(t);
}

/** Resolves after `ms` of real time, or early (false) when `signal` aborts; true when the full time passed. */
export function delay(ms: number, opts: WallTimerOptions & { signal?: AbortSignal } = {}): Promise<boolean> {
  const { signal } = opts;
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      cancel();
      resolve(false);
    };
    const cancel = timeout(
      () => {
        signal?.removeEventListener('abort', onAbort);
        resolve(true);
      },
      ms,
      opts,
    );
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A monotonic reading in milliseconds (for durations: it never goes back when the wall clock is set). */
export const monotonic = (): number => performance.now();

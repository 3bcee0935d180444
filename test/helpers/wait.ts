// The one polling wait of the test suite. A test waits for a condition, never for a fixed time:
// the condition is checked at once and then every `intervalMs`, so a wait ends as soon as what it
// waits for is true, and `timeoutMs` is only the generous limit a loaded machine needs.

export interface WaitOptions {
  /** What the test waits for, named in the timeout error; a function is called only on timeout, for detail. */
  what: string | (() => string | Promise<string>);
  /** The limit; generous by default (the machine running the suite may be loaded). */
  timeoutMs?: number;
  /** How often the condition is checked. */
  intervalMs?: number;
  /** A condition that throws is treated as "not yet" (e.g. a server still restarting) instead of failing the wait. */
  ignoreErrors?: boolean;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Resolves with the condition's first truthy value; rejects naming `what` after `timeoutMs`. */
export async function waitFor<T>(condition: () => T | Promise<T>, opts: WaitOptions): Promise<NonNullable<Exclude<T, false | 0 | ''>>> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let value: T | undefined;
    try {
      value = await condition();
    } catch (err) {
      if (!opts.ignoreErrors) throw err;
    }
    if (value) return value as NonNullable<Exclude<T, false | 0 | ''>>;
    if (Date.now() > deadline) {
      const what = typeof opts.what === 'string' ? opts.what : await opts.what();
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await sleep(opts.intervalMs ?? 50);
  }
}

/**
 * One turn of the event loop: resolves in the next check phase, so every `process.nextTick`
 * callback and promise job queued before the call has run (and any rejection they left unhandled
 * has been reported). For what the code under test emits on a later tick, such as the warning
 * `process.emitWarning` defers to `nextTick`: no timer, and nothing to guess.
 */
export function nextTurn(): Promise<void> {
  return new Promise((r) => setImmediate(r));
}

/**
 * The suite's only fixed waits, each with its reason written at the call. Everything else waits
 * for a condition (`waitFor`), moves a clock, or takes a turn of the event loop (`nextTurn`). Use
 * these only where real time is itself the evidence, against real processes that take no clock of
 * ours:
 *
 * - `quietFor`: a negative assertion ("nothing happens during `ms`"); keep `ms` the shortest
 *   that still proves it.
 * - `holdFor`: a phase of a scenario that lasts real time (an outage of a given length, an
 *   observation window whose length the assertions are computed from).
 * - `pace`: spacing in a load generator or a fake upstream's latency (the shape of the load, not
 *   a wait for anything).
 */
export function quietFor(ms: number, why: string): Promise<void> {
  if (!why) throw new Error('quietFor needs its reason');
  return sleep(ms);
}

/** A scenario phase of `ms` real time (see above); `why` says why its length matters. */
export function holdFor(ms: number, why: string): Promise<void> {
  if (!why) throw new Error('holdFor needs its reason');
  return sleep(ms);
}

/** Spacing between the requests of a load generator, or a fake's latency (see above). */
export function pace(ms: number): Promise<void> {
  return sleep(ms);
}

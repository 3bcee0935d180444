import { sleep, type Clock, type Random } from './clock.js';

/**
 * How a failing operation is tried again: exponential backoff from `baseMs` by `factor`, capped
 * at `maxMs`, with up to `jitter` (a fraction) taken off at random so replicas that failed
 * together do not retry together.
 */
export interface RetryPolicy {
  baseMs: number;
  maxMs: number;
  factor?: number;
  jitter?: number;
  /** At most this many attempts in all (default: no limit). */
  attempts?: number;
  /** A clock time after which no further wait starts: the last error is thrown instead. */
  deadline?: () => number;
  signal?: AbortSignal;
  clock: Clock;
  random?: Random;
  /** False: the error is final, thrown at once. */
  retryIf?: (err: unknown, attempt: number) => boolean;
  /** Called before each wait, for logs and metrics. */
  onRetry?: (err: unknown, attempt: number, waitMs: number) => void;
}

/** The wait after the `attempt`-th failure (1-based). */
export function backoffMs(attempt: number, p: Pick<RetryPolicy, 'baseMs' | 'maxMs' | 'factor' | 'jitter' | 'random'>): number {
  const raw = Math.min(p.maxMs, p.baseMs * (p.factor ?? 2) ** Math.min(attempt - 1, 30));
  const cut = p.jitter ? raw * p.jitter * (p.random ?? Math.random)() : 0;
  return Math.round(raw - cut);
}

/**
 * Runs `fn` until it succeeds, or until the policy says stop (attempts used up, the deadline would
 * pass during the wait, the signal aborted, or `retryIf` refuses): then the last error is thrown.
 */
export async function retry<T>(fn: (attempt: number) => Promise<T>, p: RetryPolicy): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (p.retryIf && !p.retryIf(err, attempt)) throw err;
      if (p.attempts !== undefined && attempt >= p.attempts) throw err;
      if (p.signal?.aborted) throw err;
      const wait = backoffMs(attempt, p);
      if (p.deadline && p.clock.now() + wait > p.deadline()) throw err;
      p.onRetry?.(err, attempt, wait);
      if (!(await sleep(p.clock, wait, p.signal))) throw err;
    }
  }
}

import { UserError } from '../config/errors.js';

/**
 * A stop signal during start-up (issue 49, point 5): while a replica waits on a server that does
 * not answer (a blackholed PostgreSQL, silent sentinels), it holds nothing and has written
 * nothing, so SIGTERM ends the wait at once instead of after the connect timeout's retries.
 * A `UserError`, so that if it ever reached the CLI's top level it would still be one line.
 */
export class StartupInterrupted extends UserError {}

/**
 * `work` (a connection being opened), unless `signal` aborts first: then it rejects at once with
 * `StartupInterrupted` naming `what` was being waited on, and whatever `work` still opens is
 * closed (`drop`) when it settles.
 */
export function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined, what: string, drop: (opened: T) => unknown): Promise<T> {
  if (!signal) return work;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      void work.then(drop, () => undefined);
      reject(new StartupInterrupted(`start-up interrupted by ${String(signal.reason)} while connecting to ${what}: exiting, nothing was started`));
    };
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err as Error);
      },
    );
  });
}

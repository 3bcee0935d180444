import { setMaxListeners } from 'node:events';
import type { Clock, Random } from '../time/clock.js';
import { sleep } from '../time/clock.js';
import type { Deadline } from '../time/deadline.js';
import type { Logger } from '../telemetry/logger.js';
import type { JobDefinition } from './job.js';
import type { RoundReport, RoundRunner } from './round-runner.js';
import { Schedule } from './schedule.js';
import { retry } from '../time/retry.js';
import { NotFound } from '../errors/app-error.js';

export interface SchedulerDeps {
  jobs: JobDefinition[];
  runner: RoundRunner;
  clock: Clock;
  random: Random;
  log: Logger;
  /** Database clock minus this replica's clock; slots are computed on `clock.now() + offset`. */
  clockOffsetMs: () => number;
  /** The last slot claimed cluster-wide, so a restart neither replays nor forgets a slot. */
  lastSlot: (job: string) => Promise<Date | null>;
}

/** Longest single sleep; a loop wakes at least this often to re-read the clock offset. */
const MAX_SLEEP_MS = 60_000;
/** A requested round refused because one is running asks again after this, doubling up to the max. */
const REQUEST_RETRY_MIN_MS = 250;
const REQUEST_RETRY_MAX_MS = 5000;
/** A requested round the lock or the claim refused (`retry` then asks again). */
class RoundRefused extends Error {}

/**
 * One loop per enabled job: wait for the next slot (+ jitter), run the round, repeat.
 * Replicas run identical loops; the round runner decides who actually runs a slot.
 */
export class Scheduler {
  // One listener per job loop (sleeps wait on it): as many as jobs, not a leak.
  private readonly stopController = manyListeners(new AbortController());
  private readonly loops = new Map<string, Promise<void>>();
  private readonly inFlight = new Set<Promise<RoundReport>>();
  private readonly nextFire = new Map<string, number>();
  /** Jobs with a requested round still to run (`requestRound`); `again`: a request came during its round. */
  private readonly requested = new Map<string, { again: boolean }>();

  constructor(private readonly deps: SchedulerDeps) {}

  get jobs(): JobDefinition[] {
    return this.deps.jobs;
  }

  job(name: string): JobDefinition | undefined {
    return this.deps.jobs.find((j) => j.name === name);
  }

  private unknown(name: string): NotFound {
    return new NotFound(`unknown job ${JSON.stringify(String(name).slice(0, 64))} (known jobs: ${this.deps.jobs.map((j) => j.name).join(', ')})`);
  }

  clusterNow(): number {
    return this.deps.clock.now() + this.deps.clockOffsetMs();
  }

  /** When this replica will next try the job (cluster clock), if it is looping. */
  nextAttempt(name: string): Date | null {
    const t = this.nextFire.get(name);
    return t === undefined ? null : new Date(t);
  }

  start(): void {
    for (const job of this.deps.jobs) {
      if (!job.settings.enabled || this.loops.has(job.name)) continue;
      this.loops.set(job.name, this.loop(job));
    }
  }

  /**
   * A manual round now, through the same lock, claim and lease as a scheduled one. A paused job's
   * round is refused (`paused` in the report) unless `force` (issue 49).
   */
  runNow(name: string, onStart?: (r: { runId: number; token: number }) => void, opts: { force?: boolean } = {}): Promise<RoundReport> {
    const job = this.job(name);
    if (!job) return Promise.reject(this.unknown(name)); // a promise's caller looks for a rejection, not a throw
    return this.track(this.deps.runner.run(job, null, onStart, { force: opts.force }));
  }

  /**
   * Asks for a round of `name` as soon as it can run, for work just queued for the job (a usage
   * recompute). Unlike `runNow`, a refusal is not the end: while a round of the job runs (here or
   * on another replica, which holds the lock or the claim) the request asks again with backoff
   * until a round of its own has run, so queued work never waits for the next slot. Requests that
   * arrive while one waits join it; one that arrives while its round runs gets one more round
   * after it (that round may have looked for work before this was queued). Ends at shutdown.
   */
  requestRound(name: string): void {
    const job = this.job(name);
    if (!job) throw this.unknown(name);
    const pending = this.requested.get(name);
    if (pending) {
      pending.again = true;
      return;
    }
    const state = { again: false };
    this.requested.set(name, state);
    void this.askUntilRun(job, state).finally(() => this.requested.delete(name));
  }

  private async askUntilRun(job: JobDefinition, state: { again: boolean }): Promise<void> {
    const stop = this.stopController.signal;
    do {
      try {
        await retry(
          async () => {
            state.again = false; // a request before this attempt is served by it
            const r = await this.track(this.deps.runner.run(job, null, undefined, { recordSkip: false }));
            if (!r.ran) throw new RoundRefused(r.reason);
          },
          {
            baseMs: REQUEST_RETRY_MIN_MS,
            maxMs: REQUEST_RETRY_MAX_MS,
            clock: this.deps.clock,
            signal: stop,
            onRetry: (err) => {
              if (!(err instanceof RoundRefused)) this.deps.log.warn({ job: job.name, err: (err as Error).message }, 'requested round could not start; asking again');
            },
          },
        );
      } catch {
        return; // only at shutdown: retry gives up on nothing else
      }
    } while (state.again && !stop.aborted);
  }

  /**
   * Stops every loop; running rounds already see the shutdown signal (wired in the runner).
   * Waits until `by` for them; returns the names of loops still busy after that.
   */
  async stop(by: Deadline): Promise<string[]> {
    this.stopController.abort();
    const busy = new Set(this.loops.keys());
    const all = [...this.loops.entries()].map(([name, p]) => p.finally(() => busy.delete(name)));
    await by.settled(Promise.allSettled([...all, ...this.inFlight]));
    return [...busy];
  }

  private track(p: Promise<RoundReport>): Promise<RoundReport> {
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p)).catch(() => undefined);
    return p;
  }

  private async loop(job: JobDefinition): Promise<void> {
    const { clock, random, runner } = this.deps;
    const stop = this.stopController.signal;
    const log = this.deps.log.child({ job: job.name });
    const schedule = new Schedule(job.settings.schedule);
    let last: number | null;
    try {
      last = await retry(async () => (await this.deps.lastSlot(job.name))?.getTime() ?? null, {
        baseMs: 1000,
        maxMs: 30_000,
        clock,
        signal: stop,
        onRetry: (err) => log.warn({ err: (err as Error).message }, 'cannot read the last slot yet; retrying'),
      });
    } catch {
      return; // stopped before the database answered
    }
    log.info({ schedule: schedule.describe(), scope: job.scope }, 'job loop started');
    while (!stop.aborted) {
      const now = this.clusterNow();
      const { slot } = schedule.target(now, last, job.settings.missed, job.settings.jitterMs);
      const fireAt = slot + (job.settings.jitterMs > 0 ? Math.floor(random() * job.settings.jitterMs) : 0);
      this.nextFire.set(job.name, fireAt);
      if (fireAt > now) {
        await sleep(clock, Math.min(fireAt - now, MAX_SLEEP_MS), stop);
        if (stop.aborted) break;
        if (this.clusterNow() < fireAt) continue; // woke early to re-read the offset
      }
      try {
        await this.track(runner.run(job, new Date(slot)));
      } catch (err) {
        log.error({ err: (err as Error).message, slot: new Date(slot).toISOString() }, 'round could not start');
      }
      last = slot;
    }
    this.nextFire.delete(job.name);
  }
}

/** A controller whose signal is awaited by every job loop or round at once: no MaxListeners warning past 10 jobs. */
export function manyListeners(c: AbortController): AbortController {
  setMaxListeners(1000, c.signal);
  return c;
}

import type { Clock } from '../time/clock.js';
import type { Deadline } from '../time/deadline.js';
import type { Logger } from '../telemetry/logger.js';
import { describePause, type JobPause, type JobPauses } from '../coordination/job-pauses.js';
import { ServiceLoop, type LoopTickCounter } from '../workers/service-loop.js';
import type { WakeHub } from '../workers/wake-hub.js';

/** The wake-up topic a pause or resume notifies (migration 031's trigger on `job_state`). */
export const PAUSE_TOPIC = 'job_pauses';

/**
 * This replica's copy of which jobs are paused (issue 49). The truth is `job_state` (migration
 * 031); the copy lets a round be skipped before it touches Redis or PostgreSQL, and it is the only
 * guard of scheduled instance-scoped rounds, which have no claim statement to refuse them.
 *
 * How fresh it is: loaded before the scheduler starts (a restart keeps the pause from its first
 * slot); re-read when a pause or resume notifies `job_pauses` (every replica within a round trip
 * of the commit), when the wake-up listener (re)connects (every loop looks once), and at the
 * backstop: `cluster.instance_heartbeat` while no listener is up, `wakeups.backstop` while one is
 * (a notification is lost only with the listening session, whose reopening wakes this loop).
 * A change made on this replica applies at once (`set`). Cluster-scoped rounds do not depend on
 * it: their claim refuses a paused job atomically (`coordination/slot-claim.ts`).
 */
export class PauseBook {
  private paused = new Map<string, JobPause>();
  private readonly loop: ServiceLoop;
  private wakes: WakeHub | null = null;

  constructor(
    private readonly o: {
      store: JobPauses;
      clock: Clock;
      log: Logger;
      /** The backstop without a wake-up listener: the replica's heartbeat interval. */
      pollMs: number;
      ticks?: LoopTickCounter;
    },
  ) {
    this.loop = new ServiceLoop({
      name: 'job_pauses',
      clock: o.clock,
      log: o.log,
      ticks: o.ticks,
      backstopMs: () => (this.wakes ? this.wakes.idleMs(o.pollMs)() : o.pollMs),
      errorDelayMs: o.pollMs,
      tick: async () => ({ items: await this.load() }),
    });
  }

  /** Re-reads on every `job_pauses` notification (and when the listener connects: the hub wakes every loop). */
  listen(wakes: WakeHub): void {
    this.wakes = wakes;
    wakes.on(PAUSE_TOPIC, (why) => this.loop.wake(why));
  }

  /** The job's pause as this replica last read it, or null. */
  get(job: string): JobPause | null {
    return this.paused.get(job) ?? null;
  }

  /** Pauses `job` cluster-wide (see JobPauses.pause); this replica applies it at once, the others on the notification. */
  async pause(job: string, actor: string, reason: string): Promise<{ changed: boolean; pause: JobPause }> {
    const r = await this.o.store.pause(job, actor, reason);
    this.apply(job, r.pause);
    return r;
  }

  /** Resumes `job` cluster-wide (see JobPauses.resume). */
  async resume(job: string, actor: string, reason: string | null = null): Promise<{ changed: boolean; was: JobPause | null }> {
    const r = await this.o.store.resume(job, actor, reason);
    this.apply(job, null);
    return r;
  }

  /** Who paused and resumed `job`, when and why, newest first. */
  audit(job: string, limit?: number): ReturnType<JobPauses['audit']> {
    return this.o.store.audit(job, limit);
  }

  /** Every paused job as the database has it now (what the job views show). */
  read(): Promise<Map<string, JobPause>> {
    return this.o.store.list();
  }

  /** Every pause this replica knows of (the job views read the database instead: `JobPauses.list`). */
  all(): JobPause[] {
    return [...this.paused.values()];
  }

  /** Reads every pause; returns how many changed here. */
  async load(): Promise<number> {
    const now = await this.o.store.list();
    let changed = 0;
    for (const job of new Set([...this.paused.keys(), ...now.keys()])) if (this.apply(job, now.get(job) ?? null)) changed++;
    return changed;
  }

  start(): void {
    this.loop.start();
  }

  stop(by: Deadline): Promise<number> {
    return this.loop.stop(by);
  }

  private apply(job: string, pause: JobPause | null): boolean {
    const cur = this.paused.get(job);
    if (pause && cur && cur.at.getTime() === pause.at.getTime()) return false;
    if (!pause && !cur) return false;
    if (pause) {
      this.paused.set(job, pause);
      this.o.log.info({ job, paused_by: pause.by, reason: pause.reason }, `job ${job} ${describePause(pause)}: no new round starts until it is resumed`);
    } else {
      this.paused.delete(job);
      this.o.log.info({ job }, `job ${job} resumed`);
    }
    return true;
  }
}

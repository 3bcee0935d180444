import { Cron } from 'croner';
import { cronZone } from '../time/zones.js';
import type { MissedSlotPolicy, ScheduleSpec } from '../config/job-settings.js';
import { formatDuration } from '../config/duration.js';

/**
 * A pure function of time: which slots a job has. `every` slots are aligned to the wall clock
 * (multiples of the interval since the epoch, so `every: 1h` fires on the hour on every
 * replica); `cron` slots come from croner in the job's time zone. Both are then shifted by the
 * job's offset (`jobs.<name>.offset`, by default a stable hash of its name, job-settings.ts), so
 * jobs of one cadence do not all start in the same second; every replica computes the same
 * shifted slot, which is what the slot claim keys on. Slot times are computed on the cluster
 * clock (the database's), never on a replica's own.
 */
export class Schedule {
  private readonly cron: Cron | null;

  constructor(readonly spec: ScheduleSpec) {
    this.cron = spec.kind === 'cron' ? new Cron(spec.expr, { ...cronZone(spec.timezone), paused: true }) : null;
  }

  /** How far after each aligned (or cron) instant this job's slots fall. */
  get offsetMs(): number {
    return this.spec.offsetMs ?? 0;
  }

  /** The first slot strictly after `t`. */
  next(t: number): number {
    const off = this.offsetMs;
    return this.baseNext(t - off) + off;
  }

  /** The latest slot at or before `t`. */
  prev(t: number): number {
    const off = this.offsetMs;
    return this.basePrev(t - off) + off;
  }

  private baseNext(t: number): number {
    if (this.spec.kind === 'every') return Math.floor(t / this.spec.everyMs) * this.spec.everyMs + this.spec.everyMs;
    const d = this.cron!.nextRun(new Date(t));
    if (!d) throw new Error(`cron ${this.spec.expr} has no future run`);
    return d.getTime();
  }

  private basePrev(t: number): number {
    if (this.spec.kind === 'every') return Math.floor(t / this.spec.everyMs) * this.spec.everyMs;
    // croner's previousRuns is strictly before the reference, so look from just after t.
    const d = this.cron!.previousRuns(1, new Date(t + 1))[0];
    return d ? d.getTime() : Number.NEGATIVE_INFINITY;
  }

  /** The gap between the slot at or before `t` and the one after it: the job's cadence there. */
  periodAt(t: number): number {
    if (this.spec.kind === 'every') return this.spec.everyMs;
    const p = this.prev(t);
    return Number.isFinite(p) ? this.next(p) - p : this.next(this.next(t)) - this.next(t);
  }

  /**
   * The slot a job loop should aim for next. A slot that fell due while the job was not
   * running here (downtime, a long round) runs once, late; older missed slots are not
   * replayed, so recovery never runs a job N times. A job that never ran starts at once on
   * `every` and waits for its next slot on `cron` (a daily report is not sent on install).
   */
  target(now: number, lastSlot: number | null, policy: MissedSlotPolicy = 'run_late', jitterMs = 0): { slot: number; late: boolean } {
    const p = this.prev(now);
    const missed = lastSlot === null ? this.spec.kind === 'every' && Number.isFinite(p) : p > lastSlot;
    // `skip`: a slot already past its lateness tolerance is let go (a job that never ran still starts on `every`).
    if (missed && policy === 'skip' && lastSlot !== null && now - p > this.toleranceAt(p) + jitterMs) return { slot: this.next(now), late: false };
    if (missed) return { slot: p, late: true };
    return { slot: this.next(now), late: false };
  }

  /** How late a start may be and still count as on time: a quarter of the period, at most 5 s. */
  toleranceAt(t: number): number {
    return Math.min(5000, Math.floor(this.periodAt(t) / 4));
  }

  describe(): string {
    const base = this.spec.kind === 'every' ? `every ${formatDuration(this.spec.everyMs)}` : `cron "${this.spec.expr}" ${this.spec.timezone}`;
    return this.offsetMs > 0 ? `${base} + ${formatDuration(this.offsetMs)}` : base;
  }
}

import { ServiceLoop, type LoopTickCounter } from '../../workers/service-loop.js';
import type { Clock } from '../../time/clock.js';
import type { Deadline } from '../../time/deadline.js';
import type { Logger } from '../../telemetry/logger.js';
import type { PlatformQuota } from './platform-quota.js';

/**
 * The quota flush on the loop block (issue 26): asleep while nothing is dirty. An increment or
 * reset on this replica (`dirtied()`) sets a flush `delayMs` later, so a burst of increments
 * costs one flush per delay, as the 5 s job did; an idle replica touches neither PostgreSQL nor
 * Redis until the backstop, which reads the dirty set's size only (one SCARD) and flushes when
 * another replica left keys behind (it crashed before its flush). A flush that put keys back
 * (PostgreSQL refused them) looks again after the delay.
 */
export class QuotaFlushLoop {
  private readonly loop: ServiceLoop;
  /** When the flush set by the first increment since the last flush is due (null: nothing pending). */
  private dueAt: number | null = null;

  constructor(
    private readonly quota: PlatformQuota,
    private readonly o: { clock: Clock; log: Logger; delayMs: number; backstopMs: number | (() => number); ticks?: LoopTickCounter },
  ) {
    this.loop = new ServiceLoop({ name: 'platform_quota_flush', clock: o.clock, log: o.log, backstopMs: o.backstopMs, errorDelayMs: o.delayMs, ticks: o.ticks, tick: () => this.tick() });
  }

  start(): void {
    this.loop.start();
  }

  stop(by: Deadline): Promise<number> {
    return this.loop.stop(by);
  }

  /** Ticks so far (tests). */
  get ticks(): number {
    return this.loop.ticksRun;
  }

  /** A counter on this replica became dirty: a flush `delayMs` from now, unless one is already pending. */
  dirtied(): void {
    if (this.dueAt !== null) return;
    this.dueAt = this.o.clock.now() + this.o.delayMs;
    this.loop.wake('quota_dirty');
  }

  private async tick(): Promise<{ items: number; nextDueAt: number | null }> {
    const now = this.o.clock.now();
    if (this.dueAt !== null && now < this.dueAt) return { items: 0, nextDueAt: this.dueAt };
    this.dueAt = null;
    const dirty = await this.quota.dirtyCount();
    if (dirty === null) throw new Error('quota counters unreachable: dirty set size unknown');
    if (dirty === 0) return { items: 0, nextDueAt: null };
    const r = await this.quota.flushAll(1000);
    if (r.stale) this.o.log.info({ stale: r.stale }, 'quota snapshots older than the stored value were skipped (a reset or a newer flush won)');
    return { items: r.flushed, nextDueAt: r.reAdded > 0 ? now + this.o.delayMs : null };
  }
}

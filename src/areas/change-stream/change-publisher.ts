import type { ChangeEvents, ChangeEvent } from './store/change-events.js';
import type { ChangeStreamMetrics } from './metrics.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Clock } from '../../time/clock.js';
import type { Deadline } from '../../time/deadline.js';
import { ServiceLoop, type LoopTickCounter } from '../../workers/service-loop.js';

export interface PublisherOptions {
  pollIntervalMs: number;
  batchSize: number;
  retentionMs: number;
  /** Sleep when nothing is pending (wake-ups on: the backstop; off: the poll interval). */
  backstopMs?: number | (() => number);
  /** `ServiceLoop.wakeSpacingMs` (wiring: `WAKE_SPACING_MS`). */
  wakeSpacingMs?: number;
  ticks?: LoopTickCounter;
}

/** How often a replica deletes published events past `change_stream.retention`. */
const PRUNE_EVERY_MS = 60_000;

/**
 * The change stream's publisher (every replica runs one; one publishes at a time, the others skip
 * while it holds the lock). A tick publishes batches until none is left or a second has passed:
 * each batch is sent (`send`: XADD to the Redis Stream; nothing in embedded mode, where the log
 * in PostgreSQL is the stream) and then marked published with its seq, in the transaction that
 * holds the lock. Woken by the outbox's notifications, else a poll every `poll_interval`.
 */
export class ChangePublisher {
  private readonly loop: ServiceLoop;
  private nextPrune = 0;

  constructor(
    private readonly events: ChangeEvents,
    private readonly send: (events: ChangeEvent[]) => Promise<void>,
    private readonly clock: Clock,
    private readonly metrics: ChangeStreamMetrics,
    log: Logger,
    private readonly o: PublisherOptions,
  ) {
    this.loop = new ServiceLoop({
      name: 'change_stream',
      clock,
      log,
      backstopMs: o.backstopMs ?? o.pollIntervalMs,
      wakeSpacingMs: o.wakeSpacingMs,
      errorDelayMs: o.pollIntervalMs,
      ticks: o.ticks,
      onError: () => this.metrics.failures.inc(),
      tick: async (signal) => {
        const r = await this.publishPending(signal, true);
        // Another replica is publishing (or more is left): look again at the poll interval.
        return { items: r.published, nextDueAt: r.busy || r.more ? this.clock.now() + o.pollIntervalMs : null };
      },
    });
  }

  start(): void {
    this.loop.start();
  }

  wake(reason = 'wake'): void {
    this.loop.wake(reason);
  }

  stop(by: Deadline): Promise<number> {
    return this.loop.stop(by);
  }

  /**
   * Publishes until nothing is pending, another replica holds the lock, or a second has passed.
   * `loop`: a tick of the publisher's own loop, which skips the backlog read when it lost the lock
   * (the job's round always reads it: its lag bound is judged on every replica).
   */
  async publishPending(signal?: AbortSignal, loop = false): Promise<{ published: number; busy: boolean; more: boolean; backlog: number; lagSeconds: number }> {
    const started = this.clock.now();
    let published = 0;
    let pass: { published: number; busy: boolean };
    for (;;) {
      pass = await this.events.publish(this.o.batchSize, this.send);
      published += pass.published;
      this.metrics.published.inc(pass.published);
      if (pass.published < this.o.batchSize || pass.busy || signal?.aborted || this.clock.now() - started >= 1000) break;
    }
    const { busy } = pass;
    const more = pass.published === this.o.batchSize;
    if (this.clock.now() >= this.nextPrune) {
      this.nextPrune = this.clock.now() + PRUNE_EVERY_MS;
      await this.events.prune(this.o.retentionMs, 1000, 20);
    }
    // Another replica holds the lock: it publishes what is pending and reads the backlog (the gauges
    // are its), and this one looks again at the poll interval; a losing tick is its one publish
    // transaction, not a backlog read more (docs/scaling.md: every event woke every replica).
    if (loop && busy && published === 0) return { published, busy, more: true, backlog: 0, lagSeconds: 0 };
    const b = await this.events.backlog();
    this.metrics.backlog.set(b.count);
    this.metrics.lag.set(b.lagSeconds);
    return { published, busy, more: more || (busy && b.count > 0), backlog: b.count, lagSeconds: b.lagSeconds };
  }
}

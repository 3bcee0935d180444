import type { Clock } from '../../time/clock.js';
import type { Logger } from '../../telemetry/logger.js';
import type { ImagesMetrics } from './metrics.js';
import type { ImageBatch, ImageBatches } from './store/image-batches.js';
import type { BatchLease, ImageQueue } from './store/image-queue.js';
import type { BatchDriver } from './batch-driver.js';
import { settledWithin } from '../../time/clock.js';
import { LeaseKeeper } from '../../coordination/lease-keeper.js';
import { ServiceLoop, type LoopTickCounter } from '../../workers/service-loop.js';
import { idleUntil, type WakeHub } from '../../workers/wake-hub.js';
import { withSpan } from '../../telemetry/tracing.js';

export interface WorkerOptions {
  owner: string;
  concurrency: number;
  leaseMs: number;
  claimIntervalMs: number;
  retryDelayMs: number;
  /** Steps driven in a row under one claim before the batch goes back to the queue. */
  maxStepsPerClaim?: number;
  /** Wake-ups: while its listener is up, an idle worker sleeps until the next batch is due (`nextDueMs`) or the backstop. */
  wakes?: WakeHub;
  nextDueMs?: () => Promise<number | null>;
  ticks?: LoopTickCounter;
}

/**
 * The per-replica loop: claims up to `concurrency` ready batches, drives each while its steps
 * say `again`, heartbeats the lease every lease/3, and hands the batch back (ready or delayed)
 * when a step says `later`. Each tick also runs the delayed mover and stale-active recovery,
 * so a replica that dies loses only its leases, which the others take over after `leaseMs`.
 */
export class BatchWorker {
  private running = new Set<Promise<void>>();
  /** Set by stop(): batches in hand go back to the queue after their current step. */
  private draining = false;
  /** Rows the last tick's mover and stale recovery made ready: claimable now. */
  private moved = 0;
  private readonly loop: ServiceLoop;

  constructor(
    private readonly batches: ImageBatches,
    private readonly queue: ImageQueue,
    private readonly driver: BatchDriver | null,
    private readonly o: WorkerOptions,
    private readonly clock: Clock,
    private readonly metrics: ImagesMetrics,
    private readonly log: Logger,
  ) {
    this.loop = new ServiceLoop({
      name: 'batch_image_worker',
      clock,
      log,
      backstopMs: o.wakes ? o.wakes.idleMs(o.claimIntervalMs) : o.claimIntervalMs,
      errorDelayMs: o.claimIntervalMs,
      ticks: o.ticks,
      tick: () => this.pass(),
    });
  }

  start(): void {
    if (!this.driver) {
      this.log.warn('batch_image_worker is enabled but image.provider.base_url is not set: no image batch is driven');
      return;
    }
    this.loop.start();
  }

  /** A batch became ready (a wake-up): claim now. */
  wake(reason = 'wake'): void {
    this.loop.wake(reason);
  }

  /** Stops claiming and waits up to `withinMs` for batches in hand; returns how many were still running. */
  async stop(withinMs: number): Promise<number> {
    this.draining = true;
    await this.loop.stop(withinMs);
    await settledWithin(Promise.all(this.running), withinMs);
    return this.running.size;
  }

  /**
   * One claim tick (also used by tests and the benchmark): claim and drive, then the delayed
   * mover and stale recovery. The claim comes first so a batch that woke the loop is not behind
   * two maintenance statements (issue 26's latency); rows those make ready are claimed by the
   * next tick, at once (`moved`).
   */
  async tick(): Promise<number> {
    const leases = await this.queue.claim(this.o.owner, this.o.concurrency - this.running.size, this.o.leaseMs);
    for (const l of leases) {
      const p = this.drive(l).finally(() => {
        this.running.delete(p);
        this.loop.wake('slot_free');
      });
      this.running.add(p);
    }
    const due = await this.queue.moveDue();
    const stale = await this.queue.recoverStale();
    if (stale) {
      this.metrics.staleRecovered.inc(stale);
      this.log.warn({ batches: stale }, 'image batches with an expired lease handed back to the queue');
    }
    this.moved = due + stale;
    return leases.length;
  }

  /** Resolves when every batch in hand has been handed back or finished. */
  async idle(): Promise<void> {
    while (this.running.size) await Promise.all(this.running);
  }

  /** One loop tick. Claimed with room left: again at once. Full: until a slot frees (a wake-up) or the interval. Idle: the interval, or with wake-ups on the next due batch. */
  private async pass(): Promise<{ items: number; nextDueAt: number | null }> {
    const claimed = await this.tick();
    const now = this.clock.now();
    const full = this.running.size >= this.o.concurrency;
    if ((claimed > 0 || this.moved > 0) && !full) return { items: claimed, nextDueAt: now };
    if (claimed > 0 || full) return { items: claimed, nextDueAt: now + this.o.claimIntervalMs };
    return { items: 0, nextDueAt: await idleUntil(now, this.o.claimIntervalMs, this.o.wakes, this.o.nextDueMs) };
  }

  private async drive(l: BatchLease): Promise<void> {
    let lost = false;
    // Renewed every third of the lease, trusted only until it could have expired (coordination/lease-keeper.ts).
    const keeper = new LeaseKeeper({
      clock: this.clock,
      leaseMs: this.o.leaseMs,
      renewLease: () => this.queue.heartbeat(l, this.o.leaseMs),
      onLost: (reason) => {
        lost = true;
        this.metrics.leasesLost.inc();
        this.log.warn({ batch: l.batchId, fence: l.fence, reason }, 'lost the lease of an image batch; its next write is refused');
      },
    });
    keeper.start();
    try {
      let written: ImageBatch | undefined;
      for (let i = 0; i < (this.o.maxStepsPerClaim ?? 20); i++) {
        // The row the last step wrote (under this lease) or, first, a fresh read.
        const b = written ?? (await this.batches.get(l.batchId));
        if (!b) return;
        const attrs = { 'relay_jobs.batch_id': l.batchId, 'relay_jobs.state': b.state, 'relay_jobs.fence': l.fence };
        const outcome = await withSpan(`image_batch ${b.state}`, attrs, async (span) => {
          const o = await this.driver!.step(l, b, this.clock.now());
          span.set({ 'relay_jobs.outcome': o.kind });
          return o;
        });
        written = outcome.kind === 'again' ? outcome.batch : undefined;
        this.metrics.steps.inc({ outcome: outcome.kind });
        if (outcome.kind === 'done') return;
        if (outcome.kind === 'later' || this.draining || lost) {
          await this.queue.requeue(l, outcome.kind === 'later' ? outcome.delayMs : 0);
          return;
        }
      }
      await this.queue.requeue(l, 0);
    } catch (err) {
      this.metrics.steps.inc({ outcome: 'error' });
      this.log.error({ batch: l.batchId, err: (err as Error).message }, 'image batch step failed; retrying later');
      await this.queue.requeue(l, this.o.retryDelayMs).catch(() => undefined);
    } finally {
      keeper.stop();
    }
  }
}

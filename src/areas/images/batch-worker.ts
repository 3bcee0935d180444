import type { Clock } from '../../time/clock.js';
import type { Logger } from '../../telemetry/logger.js';
import type { ImagesMetrics } from './metrics.js';
import type { ImageBatch, ImageBatches } from './store/image-batches.js';
import type { BatchLease, ImageQueue } from './store/image-queue.js';
import type { BatchDriver } from './batch-driver.js';
import type { Deadline } from '../../time/deadline.js';
import { LeaseKeeper } from '../../coordination/lease-keeper.js';
import { ClaimRunner, type ClaimPace, type ClaimPass } from '../../workers/claim-runner.js';
import type { LoopTickCounter } from '../../workers/service-loop.js';
import type { WakeHub } from '../../workers/wake-hub.js';
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
 * The loop is the kernel's claim runner (workers/claim-runner.ts); this class keeps the claim,
 * the drive, the maintenance after each claim and the pacing.
 */
export class BatchWorker {
  /** Set by stop(): batches in hand go back to the queue after their current step. */
  private draining = false;
  private readonly runner: ClaimRunner<BatchLease>;

  constructor(
    private readonly batches: ImageBatches,
    private readonly queue: ImageQueue,
    private readonly driver: BatchDriver | null,
    private readonly o: WorkerOptions,
    private readonly clock: Clock,
    private readonly metrics: ImagesMetrics,
    private readonly log: Logger,
  ) {
    this.runner = new ClaimRunner<BatchLease>({
      name: 'batch_image_worker',
      clock,
      log,
      capacity: o.concurrency,
      pollMs: o.claimIntervalMs,
      wakes: o.wakes,
      nextDueMs: o.nextDueMs,
      ticks: o.ticks,
      claim: (n) => this.queue.claim(this.o.owner, n, this.o.leaseMs),
      work: (l) => this.drive(l),
      afterClaim: () => this.maintain(),
      onSlotFree: () => this.runner.wake('slot_free'),
      pace: (p) => this.pace(p),
    });
  }

  start(): void {
    if (!this.driver) {
      this.log.warn('batch_image_worker is enabled but image.provider.base_url is not set: no image batch is driven');
      return;
    }
    this.runner.start();
  }

  /** A batch became ready (a wake-up): claim now. */
  wake(reason = 'wake'): void {
    this.runner.wake(reason);
  }

  /** Stops claiming and waits, until `by` in all, for batches in hand; returns how many were still running. */
  stop(by: Deadline): Promise<number> {
    this.draining = true;
    return this.runner.stop(by);
  }

  /**
   * One claim tick (also used by tests and the benchmark): claim and drive, then the delayed
   * mover and stale recovery. The claim comes first so a batch that woke the loop is not behind
   * two maintenance statements (issue 26's latency); rows those make ready are claimed by the
   * next tick, at once (`moved`).
   */
  async tick(): Promise<number> {
    return (await this.runner.tick()).claimed;
  }

  /** Resolves when every batch in hand has been handed back or finished. */
  idle(): Promise<void> {
    return this.runner.idle();
  }

  /** After each claim: the delayed mover and stale recovery; returns the rows they made ready (claimable now). */
  private async maintain(): Promise<number> {
    const due = await this.queue.moveDue();
    const stale = await this.queue.recoverStale();
    if (stale) {
      this.metrics.staleRecovered.inc(stale);
      this.log.warn({ batches: stale }, 'image batches with an expired lease handed back to the queue');
    }
    return due + stale;
  }

  /** Claimed (or rows made ready) with room left: again at once. Full: until a slot frees (a wake-up) or the interval. Idle: the interval, or with wake-ups the next due batch. */
  private pace({ claimed, extra: moved, room }: ClaimPass): ClaimPace {
    const full = room <= 0;
    if ((claimed > 0 || moved > 0) && !full) return 'now';
    if (claimed > 0 || full) return 'poll';
    return 'idle';
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

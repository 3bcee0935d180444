import type { Clock } from '../../time/clock.js';
import type { Logger } from '../../telemetry/logger.js';
import type { ImagesMetrics } from './metrics.js';
import type { ImageBatches } from './store/image-batches.js';
import type { BatchLease, ImageQueue } from './store/image-queue.js';
import type { BatchDriver } from './batch-driver.js';
import { settledWithin } from '../../time/clock.js';

export interface WorkerOptions {
  owner: string;
  concurrency: number;
  leaseMs: number;
  claimIntervalMs: number;
  retryDelayMs: number;
  /** Steps driven in a row under one claim before the batch goes back to the queue. */
  maxStepsPerClaim?: number;
}

/**
 * The per-replica loop: claims up to `concurrency` ready batches, drives each while its steps
 * say `again`, heartbeats the lease every lease/3, and hands the batch back (ready or delayed)
 * when a step says `later`. Each tick also runs the delayed mover and stale-active recovery,
 * so a replica that dies loses only its leases, which the others take over after `leaseMs`.
 */
export class BatchWorker {
  private running = new Set<Promise<void>>();
  private stopped = true;
  /** Set by stop(): batches in hand go back to the queue after their current step. */
  private draining = false;
  private wake: (() => void) | null = null;
  private loopDone: Promise<void> = Promise.resolve();

  constructor(
    private readonly batches: ImageBatches,
    private readonly queue: ImageQueue,
    private readonly driver: BatchDriver | null,
    private readonly o: WorkerOptions,
    private readonly clock: Clock,
    private readonly metrics: ImagesMetrics,
    private readonly log: Logger,
  ) {}

  start(): void {
    if (!this.stopped) return;
    if (!this.driver) {
      this.log.warn('batch_image_worker is enabled but image.provider.base_url is not set: no image batch is driven');
      return;
    }
    this.stopped = false;
    this.loopDone = this.loop();
  }

  /** Stops claiming and waits up to `withinMs` for batches in hand; returns how many were still running. */
  async stop(withinMs: number): Promise<number> {
    this.stopped = true;
    this.draining = true;
    this.wake?.();
    await this.loopDone;
    await settledWithin(Promise.all(this.running), withinMs);
    return this.running.size;
  }

  /** One claim tick (also used by tests and the benchmark): mover, stale recovery, claim, drive. */
  async tick(): Promise<number> {
    await this.queue.moveDue();
    const stale = await this.queue.recoverStale();
    if (stale) {
      this.metrics.staleRecovered.inc(stale);
      this.log.warn({ batches: stale }, 'image batches with an expired lease handed back to the queue');
    }
    const leases = await this.queue.claim(this.o.owner, this.o.concurrency - this.running.size, this.o.leaseMs);
    for (const l of leases) {
      const p = this.drive(l).finally(() => {
        this.running.delete(p);
        this.wake?.();
      });
      this.running.add(p);
    }
    return leases.length;
  }

  /** Resolves when every batch in hand has been handed back or finished. */
  async idle(): Promise<void> {
    while (this.running.size) await Promise.all(this.running);
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      let claimed = 0;
      try {
        claimed = await this.tick();
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'image queue tick failed; retrying');
      }
      if (this.stopped) break;
      // Full: wait for a slot. Claimed something: look again at once. Nothing: wait a tick.
      const full = this.running.size >= this.o.concurrency;
      if (claimed > 0 && !full) continue;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, this.o.claimIntervalMs);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = null;
    }
  }

  private async drive(l: BatchLease): Promise<void> {
    let lost = false;
    const beat = setInterval(
      () => {
        void this.queue.heartbeat(l, this.o.leaseMs).then(
          (held) => {
            if (!held && !lost) {
              lost = true;
              this.metrics.leasesLost.inc();
              this.log.warn({ batch: l.batchId, fence: l.fence }, 'lost the lease of an image batch; its next write is refused');
            }
          },
          () => undefined,
        );
      },
      Math.max(50, Math.floor(this.o.leaseMs / 3)),
    );
    try {
      for (let i = 0; i < (this.o.maxStepsPerClaim ?? 20); i++) {
        const b = await this.batches.get(l.batchId);
        if (!b) return;
        const outcome = await this.driver!.step(l, b, this.clock.now());
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
      clearInterval(beat);
    }
  }
}

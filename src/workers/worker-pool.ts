import { setMaxListeners } from 'node:events';
import type { Metrics } from '../telemetry/metrics.js';

export type OverflowPolicy = 'sync' | 'drop';
export type SubmitOutcome = 'enqueued' | 'sync_fallback' | 'dropped';

export interface WorkerPoolOptions {
  name: string;
  concurrency: number;
  queueLimit: number;
  /** What a full queue does with a new task: `sync` runs it in the caller (default), `drop` discards it and counts it. */
  overflow?: OverflowPolicy;
  metrics?: Metrics;
  onError?: (err: unknown) => void;
}

export interface PoolStats {
  waiting: number;
  running: number;
  completed: number;
  failed: number;
  dropped: number;
  syncFallback: number;
}

/**
 * A bounded pool: at most `concurrency` tasks at once, at most `queueLimit` waiting.
 * After `stop()` nothing is queued any more: new tasks run in the caller, so an accepted task is
 * never lost to shutdown. `stopAndWait(deadline)` drains the queue and reports what remained.
 */
export class WorkerPool<T> {
  private readonly queue: T[] = [];
  private active = 0;
  private stopped = false;
  private idleWaiters: Array<() => void> = [];
  private readonly abort = new AbortController();
  readonly stats: PoolStats = { waiting: 0, running: 0, completed: 0, failed: 0, dropped: 0, syncFallback: 0 };

  constructor(
    private readonly handler: (task: T, signal: AbortSignal) => Promise<void>,
    private readonly opts: WorkerPoolOptions,
  ) {
    if (!(opts.concurrency >= 1) || !(opts.queueLimit >= 0)) throw new Error(`worker pool ${opts.name}: concurrency must be >= 1 and queueLimit >= 0`);
    // Every running task may listen on the pool's signal: one listener per task is expected.
    setMaxListeners(0, this.abort.signal);
  }

  get name(): string {
    return this.opts.name;
  }

  get isStopped(): boolean {
    return this.stopped;
  }

  /** Resolves once the task is queued, or, for an inline run, once it has finished. */
  async submit(task: T): Promise<SubmitOutcome> {
    if (!this.stopped && this.active < this.opts.concurrency && this.queue.length === 0) {
      this.launch(task);
      return 'enqueued';
    }
    if (!this.stopped && this.queue.length < this.opts.queueLimit) {
      this.queue.push(task);
      this.publish();
      return 'enqueued';
    }
    if (!this.stopped && this.opts.overflow === 'drop') {
      this.stats.dropped++;
      this.opts.metrics?.poolDropped.inc({ pool: this.opts.name });
      return 'dropped';
    }
    this.stats.syncFallback++;
    this.opts.metrics?.poolSyncFallback.inc({ pool: this.opts.name });
    await this.handler(task, this.abort.signal);
    return 'sync_fallback';
  }

  /** Stops queueing; queued and running tasks still finish. */
  stop(): void {
    this.stopped = true;
  }

  /**
   * Stops and waits until every queued and running task has finished, or until `deadlineMs`
   * has passed; then running tasks see their AbortSignal. Returns whether the pool drained.
   */
  async stopAndWait(deadlineMs: number): Promise<{ drained: boolean; remaining: number }> {
    this.stop();
    if (this.idle()) return { drained: true, remaining: 0 };
    const drained = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), deadlineMs);
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
    if (!drained) this.abort.abort(new Error(`worker pool ${this.opts.name}: shutdown deadline passed`));
    return { drained, remaining: this.queue.length + this.active };
  }

  private idle(): boolean {
    return this.active === 0 && this.queue.length === 0;
  }

  private launch(task: T): void {
    this.active++;
    this.publish();
    void this.handler(task, this.abort.signal)
      .then(
        () => void this.stats.completed++,
        (err) => {
          this.stats.failed++;
          this.opts.metrics?.poolFailed.inc({ pool: this.opts.name });
          this.opts.onError?.(err);
        },
      )
      .finally(() => {
        this.active--;
        const next = this.queue.shift();
        if (next !== undefined) this.launch(next);
        this.publish();
        if (this.idle()) for (const w of this.idleWaiters.splice(0)) w();
      });
  }

  private publish(): void {
    this.stats.waiting = this.queue.length;
    this.stats.running = this.active;
    this.opts.metrics?.poolWaiting.set({ pool: this.opts.name }, this.queue.length);
    this.opts.metrics?.poolRunning.set({ pool: this.opts.name }, this.active);
  }
}

import { setMaxListeners } from 'node:events';
import type { Metrics } from '../telemetry/metrics.js';
import type { Deadline } from '../time/deadline.js';

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
  /** Called each time a task has finished and its slot is free again (counted out of `running`). */
  onSettled?: () => void;
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
  private abort = new AbortController();
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

  /** Takes tasks again after a stop (a loop started again); tasks a stop's deadline aborted keep their aborted signal. */
  resume(): void {
    this.stopped = false;
    if (!this.abort.signal.aborted) return;
    this.abort = new AbortController();
    setMaxListeners(0, this.abort.signal);
  }

  /**
   * Stops and waits until every queued and running task has finished, or until `deadline`; then
   * running tasks see their AbortSignal. Returns whether the pool drained.
   */
  async stopAndWait(deadline: Deadline): Promise<{ drained: boolean; remaining: number }> {
    this.stop();
    if (this.idle()) return { drained: true, remaining: 0 };
    const drained = await deadline.settled(this.whenIdle());
    if (!drained) this.abort.abort(new Error(`worker pool ${this.opts.name}: shutdown deadline passed`));
    return { drained, remaining: this.queue.length + this.active };
  }

  /** Resolves once nothing is queued or running. */
  whenIdle(): Promise<void> {
    if (this.idle()) return Promise.resolve();
    return new Promise<void>((resolve) => this.idleWaiters.push(resolve));
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
        this.opts.onSettled?.();
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

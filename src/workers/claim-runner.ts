import type { Clock } from '../time/clock.js';
import type { Deadline } from '../time/deadline.js';
import type { Logger } from '../telemetry/logger.js';
import type { Metrics } from '../telemetry/metrics.js';
import { ServiceLoop, type LoopTickCounter } from './service-loop.js';
import { WorkerPool } from './worker-pool.js';
import { idleUntil, type WakeHub } from './wake-hub.js';

/** What one claim pass saw: the pacing decision (`ClaimRunnerOptions.pace`) reads it. */
export interface ClaimPass {
  /** Items claimed and started by this pass. */
  claimed: number;
  /** How many it asked for: the free slots, capped by the batch (0 when the runner was full). */
  wanted: number;
  /** Free slots left after the claim. */
  room: number;
  /** What `afterClaim` reported (for example rows it made claimable now). */
  extra: number;
}

/** When the loop looks again: at once, after the poll interval, or, idle, when the next item is due (wake-ups on) or the idle poll. */
export type ClaimPace = 'now' | 'poll' | 'idle';

export interface ClaimRunnerOptions<T> {
  /** The loop's name (loop ticks, logs, the heartbeat's loop report) and the pool's. */
  name: string;
  clock: Clock;
  log: Logger;
  /** Items in hand at most; a claim never asks for more than the free slots, so nothing claimed waits while its lease runs. */
  capacity: number;
  /** Items asked for per claim at most (default: the capacity). */
  batch?: number;
  /** The area's claim (its SQL): up to `n` items, n >= 1. A throw fails the tick (the loop logs it and retries after `errorDelayMs`). */
  claim(n: number): Promise<T[]>;
  /** The area's work on one claimed item; `signal` aborts when a stop's deadline passes with the item still running. */
  work(item: T, signal: AbortSignal): Promise<void>;
  /** Runs after each claim in the same tick (write results, move delayed rows); its number is `ClaimPass.extra`. */
  afterClaim?(): Promise<number | void>;
  /** Called instead of the claim when no slot is free. */
  onFull?(): void;
  /** Called each time an item has finished and its slot is free again. */
  onSlotFree?(): void;
  /** An item's work threw (default: logged). */
  onItemError?(err: unknown): void;
  /** When to look again after a pass (default: `poll` after a claim, else `idle`). */
  pace?(p: ClaimPass): ClaimPace;
  /** `poll`: the next pass this long after one that claimed. */
  pollMs: number;
  /** The idle poll and (without wake-ups) the backstop (default: `pollMs`). */
  idlePollMs?: number;
  /** Sleep after a failed tick (default: `pollMs`). */
  errorDelayMs?: number;
  /** Wake-ups: while its listener is up, an idle runner sleeps until the next item is due (`nextDueMs`) or the backstop. */
  wakes?: WakeHub;
  /** Milliseconds until the next item is due (database clock), null when nothing is scheduled. */
  nextDueMs?: () => Promise<number | null>;
  ticks?: LoopTickCounter;
  /** The pool's `relay_jobs_pool_*` metrics (only for a runner that has always published them). */
  metrics?: Metrics;
}

/**
 * The one claim loop of the areas' per-replica runners (monitors, scheduled account tests,
 * image batches): claim up to the free capacity, run each item in a bounded pool, and sleep
 * until the next pass (at once, the poll, or idle until the next due item, a wake-up or the
 * backstop). The area keeps what differs: its claim SQL, its item work, its pacing.
 *
 * Invariant: claims never exceed the free slots, so a claimed item starts at once (its lease runs
 * while it works, never while it waits). A stop ends the loop, then waits for the items in hand
 * until the deadline, then aborts their signal.
 */
export class ClaimRunner<T> {
  private readonly loop: ServiceLoop;
  private readonly pool: WorkerPool<T>;
  private readonly batch: number;

  constructor(private readonly o: ClaimRunnerOptions<T>) {
    this.batch = o.batch ?? o.capacity;
    this.pool = new WorkerPool<T>((item, signal) => o.work(item, signal), {
      name: o.name,
      concurrency: o.capacity,
      queueLimit: 0,
      metrics: o.metrics,
      onError: o.onItemError ?? ((err) => o.log.error({ err: (err as Error).message }, `${o.name}: item failed`)),
      onSettled: o.onSlotFree,
    });
    const idleMs = o.idlePollMs ?? o.pollMs;
    this.loop = new ServiceLoop({
      name: o.name,
      clock: o.clock,
      log: o.log,
      backstopMs: o.wakes ? o.wakes.idleMs(idleMs) : idleMs,
      errorDelayMs: o.errorDelayMs ?? o.pollMs,
      ticks: o.ticks,
      tick: () => this.pass(),
    });
  }

  /** Items running now. */
  get inHand(): number {
    return this.pool.stats.running;
  }

  get inTick(): boolean {
    return this.loop.inTick;
  }

  get isRunning(): boolean {
    return this.loop.isRunning;
  }

  /** Starts claiming; again after a stop (items a stop left running still hold their slots). */
  start(): void {
    this.pool.resume();
    this.loop.start();
  }

  /** Work was created or made due (a wake-up): claim now. */
  wake(reason = 'wake'): void {
    this.loop.wake(reason);
  }

  /**
   * One claim pass outside the loop (tests, the benchmark): claim up to the free slots, start
   * each item, then `afterClaim`.
   */
  async tick(): Promise<ClaimPass> {
    const wanted = Math.max(0, Math.min(this.o.capacity - this.inHand, this.batch));
    let claimed = 0;
    if (wanted > 0) {
      const items = await this.o.claim(wanted);
      // The pool has a free slot for each (claims never exceed them): every submit starts at once.
      for (const item of items) void this.pool.submit(item);
      claimed = items.length;
    } else {
      this.o.onFull?.();
    }
    const extra = (await this.o.afterClaim?.()) ?? 0;
    return { claimed, wanted, room: this.o.capacity - this.inHand, extra };
  }

  /** Resolves once no item is in hand. */
  idle(): Promise<void> {
    return this.pool.whenIdle();
  }

  /**
   * Stops claiming, waits for the items in hand until `itemsBy` (their signal aborts then), and
   * returns how many were still running. One budget: the loop's tick and then the items share
   * `by`; `itemsBy` (default `by`) is earlier when the area writes something after them.
   */
  async stop(by: Deadline, itemsBy: Deadline = by): Promise<number> {
    await this.loop.stop(by);
    return (await this.pool.stopAndWait(itemsBy)).remaining;
  }

  private async pass(): Promise<{ items: number; nextDueAt: number | null }> {
    const p = await this.tick();
    const now = this.o.clock.now();
    const pace = this.o.pace ? this.o.pace(p) : p.claimed > 0 ? 'poll' : 'idle';
    if (pace === 'now') return { items: p.claimed, nextDueAt: now };
    if (pace === 'poll') return { items: p.claimed, nextDueAt: now + this.o.pollMs };
    return { items: p.claimed, nextDueAt: await idleUntil(now, this.o.idlePollMs ?? this.o.pollMs, this.o.wakes, this.o.nextDueMs) };
  }
}

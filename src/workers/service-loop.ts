import type { Clock, TimerHandle } from '../time/clock.js';
import type { Logger } from '../telemetry/logger.js';
import type { Deadline } from '../time/deadline.js';
import { errorClass, loopBook, shownMessage, type LoopReport, type ReportingLoop } from './loop-book.js';

/** What one tick did, and when it wants the next one (epoch ms; omitted or null = only a wake-up or the backstop). */
export interface TickResult {
  items: number;
  nextDueAt?: number | null;
}

/** The per-tick metric: one increment per tick, by loop name and outcome (`ok`, `no_work`, `failed`). */
export interface LoopTickCounter {
  inc(labels: { loop: string; outcome: string }): void;
}

export interface ServiceLoopOptions {
  name: string;
  clock: Clock;
  log: Logger;
  /** One pass. `signal` aborts when the loop stops; a pass should end soon after. */
  tick(signal: AbortSignal): Promise<TickResult>;
  /**
   * Longest sleep between ticks: covers a missed wake-up and data whose due time the tick cannot
   * compute. `Infinity`: no backstop, for a loop whose every piece of work either wakes it or is
   * a due time the tick returns (a loop with nothing due then sleeps on no timer at all).
   */
  backstopMs: number | (() => number);
  /** Sleep after a tick that threw (default: the backstop). */
  errorDelayMs?: number;
  ticks?: LoopTickCounter;
  /** Called with the error of a failed tick (the loop logs a warning itself). */
  onError?(err: Error): void;
  /**
   * A tick running longer than this is reported as a stall (the heartbeat publishes it; the health
   * of the job that owns the loop reads `late`). Default: twice a finite backstop, at least a minute.
   */
  stallAfterMs?: number;
  /**
   * Wake-up spacing: a wake-up that finds the loop asleep runs the tick at once, unless the last
   * tick started less than this long ago; then it runs this long after that start. A lone change
   * is handled at once; a burst of commits (each notifying every replica) is a tick per spacing,
   * not one per commit. A wake-up during a tick still means one more tick right after it.
   * Default 0: always at once.
   */
  wakeSpacingMs?: number;
}

/** A stall is a tick running this long at least (a loop's default bound when its backstop is shorter or none). */
const MIN_STALL_MS = 60_000;

/**
 * The one start/stop building block of every long-running loop (River's startstop, Oban's
 * plugin timer). A loop runs `tick`, then sleeps until the tick's `nextDueAt`, capped by the
 * backstop, or until `wake(reason)`. Wake-ups that arrive during a tick coalesce into exactly
 * one more tick right after it, so no wake-up is lost and a storm of them costs one pass.
 * Ticks never overlap. `stop(deadline)` stops sleeping, aborts the running tick's signal and
 * waits for it until the deadline, returning how many ticks it left running (0 or 1). A stopped
 * loop can be started again: the new run begins once the old one has ended (a tick that outlived
 * its stop finishes first), so ticks never overlap across a restart either. Time comes from the
 * injected clock only.
 */
export class ServiceLoop implements ReportingLoop {
  /** The current run's controller; null until the first start. A new one per start. */
  private abort: AbortController | null = null;
  private running: Promise<void> | null = null;
  private timer: TimerHandle | null = null;
  private resolveSleep: (() => void) | null = null;
  private woken = false;
  /** The earliest time asked for with `dueAt` since the current tick began. */
  private dueFloor = Infinity;
  /** When the current sleep ends (Infinity: only a wake-up ends it). */
  private sleepEnd = Infinity;
  private wakeReasons = new Set<string>();
  private ticking = false;
  /** Ticks run so far (tests, the benchmark). */
  ticksRun = 0;
  // Tick stats for the heartbeat's loop report (loop-book.ts), on the injected clock.
  private failedInRow = 0;
  private firstFailureAt = 0;
  private lastError: { err: Error; at: number } | null = null;
  private tickStartedAt: number | null = null;
  /** When the last tick started (wake-up spacing). */
  private lastTickAt = -Infinity;

  constructor(private readonly o: ServiceLoopOptions) {}

  get name(): string {
    return this.o.name;
  }

  get isRunning(): boolean {
    return this.live();
  }

  /** Starts the loop; again after a stop, once the stopped run has ended. A running loop is left as it is. */
  start(): void {
    if (this.live()) return;
    const abort = new AbortController();
    this.abort = abort;
    this.woken = false;
    this.wakeReasons.clear();
    this.dueFloor = Infinity;
    const book = this.o.ticks && loopBook(this.o.ticks);
    book?.add(this);
    // The first run starts now (its first tick's synchronous part inside start(), as always); a restart after the last run ended.
    const run = this.running ? this.running.catch(() => undefined).then(() => this.run(abort.signal)) : this.run(abort.signal);
    // Only the latest run leaves the book: a run stopped and restarted before it ended must not take the new one out.
    this.running = run.finally(() => {
      if (this.abort === abort) book?.delete(this);
    });
  }

  private live(): boolean {
    return this.abort !== null && !this.abort.signal.aborted;
  }

  /** What the loop has been doing, for the heartbeat's loop report (see `LoopReport`). */
  report(nowMs: number): LoopReport {
    const b = this.backstop();
    const failing = this.failedInRow > 0 && this.lastError;
    return {
      loop: this.o.name,
      failed_in_row: this.failedInRow,
      last_error: failing ? { class: errorClass(failing.err), message: shownMessage(failing.err), ago_ms: Math.max(0, nowMs - failing.at) } : null,
      failing_for_ms: failing ? Math.max(0, nowMs - this.firstFailureAt) : null,
      in_tick_ms: this.tickStartedAt === null ? null : Math.max(0, nowMs - this.tickStartedAt),
      stall_after_ms: this.o.stallAfterMs ?? Math.max(MIN_STALL_MS, Number.isFinite(b) ? 2 * b : 0),
      ticks: this.ticksRun,
    };
  }

  /** Asks for a tick now (a change that creates work; see `wakeSpacingMs`); during a tick, one more tick follows it. */
  wake(reason = 'wake'): void {
    if (!this.live()) return;
    this.wakeReasons.add(reason);
    // Deferred only within one spacing after a tick's start: a clock stepped back (the clock is
    // wall time) must not hold a wake-up for the size of the step.
    const spacing = this.o.wakeSpacingMs ?? 0;
    const since = this.o.clock.now() - this.lastTickAt;
    if (this.resolveSleep && spacing > 0 && since >= 0 && since < spacing) return this.dueAt(this.lastTickAt + spacing);
    this.woken = true;
    this.cutSleep();
  }

  /**
   * Asks for a tick no later than `at` (a due time the last tick did not know), on the clock's
   * timer: the sleep is shortened when `at` is earlier, and a tick running now sleeps no longer
   * than `at` after it. Unlike `wake`, nothing runs before `at`.
   */
  dueAt(at: number): void {
    if (!this.live() || at >= this.dueFloor) return;
    this.dueFloor = at;
    if (this.resolveSleep && at < this.sleepEnd) this.arm(at, this.resolveSleep);
  }

  /**
   * Stops the loop: no new tick, the running one is aborted; resolves to 1 if it was still running
   * at `deadline`. A deadline already passed returns at once: 1 when a tick is in flight, else 0
   * (a sleeping loop ends without another tick).
   */
  async stop(deadline: Deadline): Promise<number> {
    const run = this.running;
    if (!this.abort || !run) return 0;
    if (!this.abort.signal.aborted) this.abort.abort(new Error(`${this.o.name} stopping`));
    this.cutSleep();
    if (deadline.passed) return this.ticking ? 1 : 0;
    return (await deadline.settled(run)) ? 0 : 1;
  }

  /** Resolves once the loop has ended (after stop). */
  async stopped(): Promise<void> {
    await this.running;
  }

  private cutSleep(): void {
    if (this.timer) this.o.clock.clearTimeout(this.timer);
    this.timer = null;
    const r = this.resolveSleep;
    this.resolveSleep = null;
    r?.();
  }

  private async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      this.woken = false;
      const reasons = [...this.wakeReasons];
      this.wakeReasons.clear();
      this.dueFloor = Infinity;
      const t0 = this.o.clock.now();
      this.lastTickAt = t0;
      let nextDueAt: number | null;
      let outcome = 'failed';
      let items = 0;
      this.ticking = true;
      this.tickStartedAt = t0;
      try {
        const r = await this.o.tick(signal);
        items = r.items;
        nextDueAt = r.nextDueAt ?? null;
        outcome = items > 0 ? 'ok' : 'no_work';
        this.failedInRow = 0;
        this.lastError = null;
      } catch (err) {
        if (!signal.aborted) {
          this.o.log.warn({ loop: this.o.name, err: (err as Error).message }, `${this.o.name}: tick failed; retrying`);
          this.o.onError?.(err as Error);
          if (this.failedInRow++ === 0) this.firstFailureAt = this.o.clock.now();
          this.lastError = { err: err instanceof Error ? err : new Error(String(err)), at: this.o.clock.now() };
        }
        nextDueAt = this.o.clock.now() + (this.o.errorDelayMs ?? this.backstop());
      } finally {
        this.ticking = false;
        this.tickStartedAt = null;
        this.ticksRun++;
      }
      this.o.ticks?.inc({ loop: this.o.name, outcome });
      this.o.log.debug({ loop: this.o.name, outcome, items, ms: this.o.clock.now() - t0, woken_by: reasons.length ? reasons : undefined, next_due_at: nextDueAt }, 'loop tick');
      if (signal.aborted) break;
      if (this.woken) continue; // wake-ups during the tick: one more tick now
      const until = Math.min(nextDueAt ?? Infinity, this.o.clock.now() + this.backstop(), this.dueFloor);
      await this.sleepUntil(until);
    }
  }

  private backstop(): number {
    return typeof this.o.backstopMs === 'function' ? this.o.backstopMs() : this.o.backstopMs;
  }

  private sleepUntil(at: number): Promise<void> {
    const ms = at - this.o.clock.now();
    if (ms <= 0 || this.woken || !this.live()) return Promise.resolve();
    return new Promise<void>((resolve) => {
      this.resolveSleep = resolve;
      this.sleepEnd = Infinity;
      if (ms !== Infinity) this.arm(at, resolve); // else nothing due and no backstop: only wake(), dueAt() or stop() ends this sleep
    });
  }

  /** (Re)sets the sleep's timer to end it at `at`. */
  private arm(at: number, resolve: () => void): void {
    if (this.timer) this.o.clock.clearTimeout(this.timer);
    this.sleepEnd = at;
    this.timer = this.o.clock.setTimeout(
      () => {
        this.timer = null;
        this.resolveSleep = null;
        this.sleepEnd = Infinity;
        resolve();
      },
      Math.max(0, at - this.o.clock.now()),
    );
  }

  /** True while a tick runs (tests). */
  get inTick(): boolean {
    return this.ticking;
  }
}

import type { Clock } from '../../time/clock.js';
import type { Deadline } from '../../time/deadline.js';
import { silentLogger, type Logger } from '../../telemetry/logger.js';
import { ServiceLoop, type LoopTickCounter } from '../../workers/service-loop.js';
import type { TraceLink } from '../../telemetry/tracing.js';

/** `takeover`: an account a dead replica left `refreshing`, refreshed at once by its new owner (issue 29). */
export type DueKind = 'refresh' | 'retry' | 'recovery' | 'recheck' | 'takeover';

export interface DueEntry {
  id: number;
  at: number;
  kind: DueKind;
  /** The token version the entry was computed from; a newer version makes it moot. */
  version: number;
  /** When the account is due; `at` is later when another replica owns it (refresh sharding's backstop). */
  due?: number;
  /** The span of the round whose sync armed it (tracing on): the refresh's span links to it. */
  cause?: TraceLink | null;
}

/** The loop wakes at least this often while anything is scheduled, so a far-away due time never overflows setTimeout. */
const MAX_TIMER_MS = 3_600_000;

/**
 * When each account is next due, for any number of accounts, on one timer. A binary min-heap
 * of entries plus a map from account to its current entry; rescheduling pushes a new entry and
 * the old one is skipped when it surfaces (lazy deletion), so every operation is O(log n) and
 * the memory is one small object per account. codex-proxy-rs spawned one task per account
 * instead (see bench/token-refresh.ts for the comparison).
 *
 * The timer is a `ServiceLoop` (`token_refresh_due`), started with the queue: a tick fires every
 * entry due and returns the heap's top as its next due time; an earlier entry shortens the sleep
 * (`dueAt`, on the clock's timer, so an entry due now fires on the next timer turn, as it did on
 * a timer of its own). With nothing scheduled it sleeps on no timer at all.
 */
export class DueQueue {
  private heap: DueEntry[] = [];
  private readonly current = new Map<number, DueEntry>();
  private readonly loop: ServiceLoop;
  private stopped = false;

  constructor(
    private readonly clock: Clock,
    private readonly onDue: (entry: DueEntry) => void,
    o: { log?: Logger; ticks?: LoopTickCounter } = {},
  ) {
    this.loop = new ServiceLoop({
      name: 'token_refresh_due',
      clock,
      log: o.log ?? silentLogger(),
      ticks: o.ticks,
      backstopMs: Infinity,
      errorDelayMs: 1000,
      tick: async () => this.fire(),
    });
    this.loop.start();
  }

  get size(): number {
    return this.current.size;
  }

  get(id: number): DueEntry | undefined {
    return this.current.get(id);
  }

  schedule(entry: DueEntry): void {
    if (this.stopped) return;
    this.current.set(entry.id, entry);
    this.push(entry);
    if (this.heap.length > 4 * this.current.size + 1024) this.compact();
    this.loop.dueAt(Math.min(entry.at, this.clock.now() + MAX_TIMER_MS));
  }

  /** Every scheduled entry, one per account. */
  entries(): IterableIterator<DueEntry> {
    return this.current.values();
  }

  cancel(id: number): void {
    this.current.delete(id);
  }

  /** Stops the timer and forgets every entry; a tick is synchronous, so nothing is ever left running (0). */
  async stop(by: Deadline): Promise<number> {
    this.stopped = true;
    this.heap = [];
    this.current.clear();
    return this.loop.stop(by);
  }

  /** One tick: hands every due entry to `onDue`, then says when the (new) top is due, at most MAX_TIMER_MS ahead. */
  private fire(): { items: number; nextDueAt: number | null } {
    const now = this.clock.now();
    const due: DueEntry[] = [];
    while (this.heap.length && this.heap[0]!.at <= now) {
      const e = this.pop()!;
      if (this.current.get(e.id) === e) {
        this.current.delete(e.id);
        due.push(e);
      }
    }
    for (const e of due) this.onDue(e);
    while (this.heap.length && this.current.get(this.heap[0]!.id) !== this.heap[0]) this.pop();
    const top = this.heap[0];
    return { items: due.length, nextDueAt: top ? Math.min(top.at, now + MAX_TIMER_MS) : null };
  }

  private compact(): void {
    this.heap = [...this.current.values()];
    for (let i = (this.heap.length >> 1) - 1; i >= 0; i--) this.down(i);
  }

  private push(e: DueEntry): void {
    const h = this.heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (h[p]!.at <= e.at) break;
      h[i] = h[p]!;
      i = p;
    }
    h[i] = e;
  }

  private pop(): DueEntry | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length && last) {
      h[0] = last;
      this.down(0);
    }
    return top;
  }

  private down(i: number): void {
    const h = this.heap;
    const e = h[i]!;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= h.length) break;
      if (c + 1 < h.length && h[c + 1]!.at < h[c]!.at) c++;
      if (h[c]!.at >= e.at) break;
      h[i] = h[c]!;
      i = c;
    }
    h[i] = e;
  }
}

import { AppError } from '../../errors/app-error.js';
import type { UsageRow, UsageStore } from './store/usage.js';
import type { DeadLetters, DeadLetterSource } from '../../store/dead-letters.js';
import { writeIsolatingPoison } from '../../store/poison-split.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import { systemClock, type Clock } from '../../time/clock.js';
import type { Deadline } from '../../time/deadline.js';
import { retry } from '../../time/retry.js';
import { ServiceLoop } from '../../workers/service-loop.js';
import { replaySpills, writeSpill } from './usage-spill.js';
import { UsageMetrics } from './metrics.js';
import { monotonic } from '../../time/wall.js';

export interface UsageWriterOptions {
  batchSize: number;
  queueLimit: number;
  overflow: 'sync' | 'drop';
  /** Where events that could not be written before exit are kept, to be written at the next start. */
  spillDir: string;
  /** The loop's clock (default: the system clock); a batch's retries and the shutdown deadline are wall time whatever it is. */
  clock?: Clock;
}

export type RecordOutcome = 'enqueued' | 'sync_fallback' | 'dropped';

/** The queue is full and the overflow policy is `drop`: the events were not accepted. */
export class UsageQueueFull extends AppError {
  constructor(readonly waiting: number) {
    super('unavailable', 'queue_full', `usage queue full (${waiting} events waiting, usage.queue_limit); retry later`);
  }
}

/** One `write` call: settled when all of its rows are committed (they may land in several batches, on several lanes). */
interface Request {
  remaining: number;
  /** Rows of this request whose request id was already stored (or repeated within the request). */
  duplicates: number;
  resolve: () => void;
  reject: (err: Error) => void;
}

interface Item {
  row: UsageRow;
  req?: Request;
}

/** Batches written at once; two keep PostgreSQL busy while the next batch is being built. */
const LANES = 2;

const MAX_BACKOFF_MS = 5000;

/**
 * Batches usage events into one multi-row statement each, on one lane, in arrival order.
 * - `write(rows)` (the HTTP API) resolves only after the rows are committed, so a 2xx means stored.
 * - `record(row)` (the library's hot path) returns at once; the row is written with the next batch.
 * - Queue full: `sync` writes the caller's rows inline (default); `drop` refuses them, counted.
 * - A database error keeps the batch at the head of the queue and retries with backoff; nothing
 *   is skipped. A batch refused for the content of some rows (a data exception) is split so only
 *   those rows go to `dead_letters` (counted); they are never retried and never block the others. At shutdown the queue is drained; what cannot be written before the deadline is
 *   spilled to `spillDir` and written at the next start (request ids make that idempotent).
 * The flush is a `ServiceLoop` (`usage_writer`), started by the first event: a tick drains the
 * queue on up to two lanes and ends when it is empty; an event arriving while it is asleep wakes
 * it, one arriving during a tick joins that tick's lanes. It has no backstop: nothing is ever
 * due but what an event brought.
 */
export class UsageWriter {
  private queue: Item[] = [];
  private lanes = 0;
  private idle: Array<() => void> = [];
  private stopping = false;
  /** The shutdown's deadline, once stop() began: a batch's retries end by it. */
  private stopBy: Deadline | null = null;
  private gaveUp = false;
  /** True while a tick drains: new events join its lanes instead of waking the loop. */
  private draining = false;
  /** Rows stored by the lanes so far (a tick's `items` is what it added). */
  private written = 0;
  private readonly loop: ServiceLoop;

  private readonly um: UsageMetrics;

  constructor(
    private readonly store: UsageStore,
    private readonly o: UsageWriterOptions,
    private readonly metrics: Metrics,
    private readonly log: Logger,
    private readonly deadLetters: DeadLetters,
  ) {
    this.um = metrics.group(UsageMetrics);
    this.loop = new ServiceLoop({
      name: 'usage_writer',
      clock: o.clock ?? systemClock,
      log,
      ticks: metrics.loopTicks,
      backstopMs: Infinity,
      errorDelayMs: 1000,
      // The abort of stop() does not cut a drain short: the shutdown deadline ends its retries.
      tick: () => this.drain(),
    });
  }

  get waiting(): number {
    return this.queue.length;
  }

  record(row: UsageRow): RecordOutcome | Promise<RecordOutcome> {
    if (this.queue.length >= this.o.queueLimit || this.stopping) {
      if (this.o.overflow === 'drop' && !this.stopping) {
        this.um.usageDropped.inc();
        return 'dropped';
      }
      this.um.usageSyncFallback.inc();
      return this.insertWithRetry([row]).then(() => 'sync_fallback' as const);
    }
    this.queue.push({ row });
    this.kick();
    return 'enqueued';
  }

  async write(rows: UsageRow[]): Promise<RecordOutcome> {
    return (await this.writeCounted(rows)).outcome;
  }

  /** `write`, also saying how many rows were stored and how many were duplicates of a stored request id. */
  async writeCounted(rows: UsageRow[]): Promise<{ outcome: RecordOutcome; stored: number; duplicates: number }> {
    if (!rows.length) return { outcome: 'enqueued', stored: 0, duplicates: 0 };
    if (this.queue.length + rows.length > this.o.queueLimit || this.stopping) {
      if (this.o.overflow === 'drop' && !this.stopping) {
        this.um.usageDropped.inc(rows.length);
        throw new UsageQueueFull(this.queue.length);
      }
      this.um.usageSyncFallback.inc(rows.length);
      const duplicates = countDuplicates(rows, await this.insertWithRetry(rows)).length;
      return { outcome: 'sync_fallback', stored: rows.length - duplicates, duplicates };
    }
    let req!: Request;
    const committed = new Promise<void>((resolve, reject) => {
      req = { remaining: rows.length, duplicates: 0, resolve, reject };
      for (const row of rows) this.queue.push({ row, req });
    });
    this.kick();
    await committed;
    return { outcome: 'enqueued', stored: rows.length - req.duplicates, duplicates: req.duplicates };
  }

  private kick(): void {
    this.um.usageWaiting.set(this.queue.length);
    this.loop.start(); // the first event starts the loop: its first tick drains at once
    if (this.draining) this.fill();
    else this.loop.wake('usage');
  }

  /** One tick: lanes write batches until the queue is empty (or, past the shutdown deadline, given up). */
  private async drain(): Promise<{ items: number }> {
    const before = this.written;
    this.draining = true;
    try {
      this.fill();
      while (this.lanes > 0) await new Promise<void>((r) => this.idle.push(r));
    } finally {
      this.draining = false;
    }
    return { items: this.written - before };
  }

  /** Starts lanes up to LANES while rows wait. */
  private fill(): void {
    while (this.lanes < LANES && this.queue.length && !this.gaveUp) {
      this.lanes++;
      void this.lane().finally(() => {
        this.lanes--;
        if (this.queue.length && !this.gaveUp) this.fill();
        else if (this.lanes === 0) for (const wake of this.idle.splice(0)) wake();
      });
    }
  }

  private async lane(): Promise<void> {
    while (this.queue.length && !this.gaveUp) {
      const batch = this.queue.splice(0, this.o.batchSize);
      this.um.usageRunning.inc(batch.length);
      try {
        const fresh = await this.insertWithRetry(batch.map((i) => i.row));
        for (const k of countDuplicates(
          batch.map((i) => i.row),
          fresh,
        ))
          if (batch[k]!.req) batch[k]!.req!.duplicates++;
      } catch {
        // Only past the shutdown deadline: give the batch back; stop() spills what is left.
        this.gaveUp = true;
        this.queue.unshift(...batch);
        break;
      } finally {
        this.um.usageRunning.dec(batch.length);
      }
      this.written += batch.length;
      for (const i of batch) if (i.req && --i.req.remaining === 0) i.req.resolve();
      this.um.usageWaiting.set(this.queue.length);
    }
  }

  /** Writes a batch, retrying database errors with the batch kept, until the shutdown deadline. */
  private async insertWithRetry(rows: UsageRow[]): Promise<Set<string>> {
    return retry(
      async () => {
        const t = monotonic();
        const fresh = await this.insertIsolated(rows, 'usage');
        this.um.usageBatchSeconds.observe((monotonic() - t) / 1000);
        this.um.usageWritten.inc(fresh.size);
        if (fresh.size < rows.length) this.um.usageDuplicates.inc(rows.length - fresh.size);
        return fresh;
      },
      {
        baseMs: 100,
        maxMs: MAX_BACKOFF_MS,
        clock: systemClock,
        // The retry waits in wall time; the shutdown deadline, on its own clock, is what it has left.
        deadline: () => (this.stopBy ? systemClock.now() + this.stopBy.leftMs() : Infinity),
        retryIf: () => (this.um.usageFailedBatches.inc(), true),
        onRetry: (err, attempt) => this.log.warn({ rows: rows.length, attempt, err: (err as Error).message }, 'usage batch write failed; retrying (the batch is kept)'),
      },
    );
  }

  /** One insert; rows the database refuses for their content are dead-lettered (the write of the others stands). */
  private async insertIsolated(rows: UsageRow[], source: DeadLetterSource): Promise<Set<string>> {
    const fresh = new Set<string>();
    const r = await writeIsolatingPoison(rows, async (part) => {
      const stored = await this.store.insertNew(part);
      for (const id of stored) fresh.add(id);
      return stored.size;
    });
    if (r.poisoned.length) {
      await this.deadLetters.add(r.poisoned.map((p) => ({ source, reason: p.reason, payload: p.row })));
      this.metrics.integrity.deadLetters.inc({ source }, r.poisoned.length);
      this.log.error(
        { rows: r.poisoned.length, request_ids: r.poisoned.slice(0, 20).map((p) => JSON.stringify(p.row.request_id)), reason: r.poisoned[0]!.reason },
        'usage rows refused by the database for their content: set aside in dead_letters (GET /api/v1/dead-letters), not retried',
      );
    }
    return fresh;
  }

  /**
   * Drains the queue, retrying until `by` (one deadline for the loop and the drain); then spills what is left. Returns the rows it
   * left undone (spilled). New events from here on are written inline (`sync`).
   */
  async stop(by: Deadline): Promise<number> {
    this.stopping = true;
    this.stopBy = by;
    const before = this.queue.length;
    await this.loop.stop(by);
    // Rows no tick picked up yet, and lanes of a tick that outlived the wait: drained under the same deadline.
    await this.drain();
    const spilled = this.queue.length;
    if (spilled) {
      this.spill(this.queue.map((i) => i.row));
      // Callers still waiting hear "not stored now"; the spill is written at the next start, and a retry is deduplicated.
      const err = new Error('usage not stored before shutdown; kept in a spill file and written at the next start');
      for (const i of this.queue) i.req?.reject(err);
      this.queue = [];
    }
    if (before) this.log.info({ drained: before - spilled, spilled }, 'usage writer drained');
    return spilled;
  }

  private spill(rows: UsageRow[]): void {
    if (!rows.length) return;
    const file = writeSpill(this.o.spillDir, rows);
    this.um.usageSpilled.inc(rows.length);
    this.log.error({ rows: rows.length, file }, 'usage events could not be written before exit; kept in a spill file, written at the next start');
  }

  /** Writes spill files left by an earlier exit, then deletes them (usage-spill.ts). */
  replaySpills(): Promise<number> {
    return replaySpills(this.o.spillDir, this.o.batchSize, (rows) => this.insertIsolated(rows, 'usage_spill'), this.deadLetters, this.metrics, this.log);
  }
}

/** Indexes of `rows` that were not stored: request id not in `fresh`, or a repeat of one earlier in `rows`. */
function countDuplicates(rows: UsageRow[], fresh: Set<string>): number[] {
  const seen = new Set<string>();
  const out: number[] = [];
  rows.forEach((r, k) => {
    if (!fresh.has(r.request_id) || seen.has(r.request_id)) out.push(k);
    seen.add(r.request_id);
  });
  return out;
}

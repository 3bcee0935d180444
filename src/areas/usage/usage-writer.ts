import { AppError } from '../../errors/app-error.js';
import { appendFileSync, mkdirSync, readdirSync, readFileSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { UsageRow, UsageStore } from './store/usage.js';
import type { DeadLetters, DeadLetterSource } from '../../store/dead-letters.js';
import { writeIsolatingPoison } from '../../store/poison-split.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import { systemClock } from '../../time/clock.js';
import { retry } from '../../time/retry.js';

export interface UsageWriterOptions {
  batchSize: number;
  queueLimit: number;
  overflow: 'sync' | 'drop';
  /** Where events that could not be written before exit are kept, to be written at the next start. */
  spillDir: string;
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
 */
export class UsageWriter {
  private queue: Item[] = [];
  private lanes = 0;
  private idle: Array<() => void> = [];
  private stopping = false;
  private deadline = Infinity;
  private gaveUp = false;

  constructor(
    private readonly store: UsageStore,
    private readonly o: UsageWriterOptions,
    private readonly metrics: Metrics,
    private readonly log: Logger,
    private readonly deadLetters: DeadLetters,
  ) {}

  get waiting(): number {
    return this.queue.length;
  }

  record(row: UsageRow): RecordOutcome | Promise<RecordOutcome> {
    if (this.queue.length >= this.o.queueLimit || this.stopping) {
      if (this.o.overflow === 'drop' && !this.stopping) {
        this.metrics.usageDropped.inc();
        return 'dropped';
      }
      this.metrics.usageSyncFallback.inc();
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
        this.metrics.usageDropped.inc(rows.length);
        throw new UsageQueueFull(this.queue.length);
      }
      this.metrics.usageSyncFallback.inc(rows.length);
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
    this.metrics.usageWaiting.set(this.queue.length);
    while (this.lanes < LANES && this.queue.length && !this.gaveUp) {
      this.lanes++;
      void this.lane().finally(() => {
        this.lanes--;
        if (this.queue.length && !this.gaveUp) this.kick();
        else if (this.lanes === 0) for (const wake of this.idle.splice(0)) wake();
      });
    }
  }

  private async lane(): Promise<void> {
    while (this.queue.length && !this.gaveUp) {
      const batch = this.queue.splice(0, this.o.batchSize);
      this.metrics.usageRunning.inc(batch.length);
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
        this.metrics.usageRunning.dec(batch.length);
      }
      for (const i of batch) if (i.req && --i.req.remaining === 0) i.req.resolve();
      this.metrics.usageWaiting.set(this.queue.length);
    }
  }

  /** Writes a batch, retrying database errors with the batch kept, until the shutdown deadline (wall time). */
  private async insertWithRetry(rows: UsageRow[]): Promise<Set<string>> {
    return retry(
      async () => {
        const t = performance.now();
        const fresh = await this.insertIsolated(rows, 'usage');
        this.metrics.usageBatchSeconds.observe((performance.now() - t) / 1000);
        this.metrics.usageWritten.inc(fresh.size);
        if (fresh.size < rows.length) this.metrics.usageDuplicates.inc(rows.length - fresh.size);
        return fresh;
      },
      {
        baseMs: 100,
        maxMs: MAX_BACKOFF_MS,
        clock: systemClock,
        deadline: () => this.deadline,
        retryIf: () => (this.metrics.usageFailedBatches.inc(), true),
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

  /** Drains the queue, retrying until `deadlineMs` from now; then spills what is left. Returns rows spilled. */
  async stop(deadlineMs: number): Promise<number> {
    this.stopping = true;
    this.deadline = systemClock.now() + deadlineMs;
    const before = this.queue.length;
    if (this.lanes > 0) await new Promise<void>((r) => this.idle.push(r));
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
    mkdirSync(this.o.spillDir, { recursive: true, mode: 0o700 });
    const file = join(this.o.spillDir, `usage-${systemClock.now()}-${process.pid}.jsonl`);
    appendFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n', { mode: 0o600 });
    this.metrics.usageSpilled.inc(rows.length);
    this.log.error({ rows: rows.length, file }, 'usage events could not be written before exit; kept in a spill file, written at the next start');
  }

  /** Writes spill files left by an earlier exit, then deletes them. Repeated request ids are skipped, so a partial earlier replay is harmless. */
  async replaySpills(): Promise<number> {
    let files: string[];
    try {
      files = readdirSync(this.o.spillDir)
        .filter((f) => /^usage-.*\.jsonl$/.test(f))
        .sort();
    } catch {
      return 0;
    }
    let total = 0;
    for (const f of files) {
      const path = join(this.o.spillDir, f);
      const rows: UsageRow[] = [];
      const unreadable: string[] = [];
      for (const line of readFileSync(path, 'utf8').split('\n').filter(Boolean)) {
        try {
          rows.push(JSON.parse(line) as UsageRow);
        } catch {
          unreadable.push(line);
        }
      }
      if (unreadable.length) {
        await this.deadLetters.add(unreadable.map((line) => ({ source: 'usage_spill', reason: `unreadable line in ${f}`, payload: line })));
        this.metrics.integrity.deadLetters.inc({ source: 'usage_spill' }, unreadable.length);
      }
      // A row the database refuses is dead-lettered, so one poison row can never stop a start.
      for (let i = 0; i < rows.length; i += this.o.batchSize) await this.insertIsolated(rows.slice(i, i + this.o.batchSize), 'usage_spill');
      unlinkSync(path);
      total += rows.length;
      this.log.info({ file: path, rows: rows.length }, 'usage spill file written and removed');
    }
    return total;
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

import type { Clock } from '../../time/clock.js';
import type { UsageWriter, RecordOutcome } from './usage-writer.js';
import { normalizeUsage, usageEventSchema, type UsageEvent } from './usage-event.js';

export interface UsageFieldError {
  field: string;
  message: string;
}

/** Usage input that cannot be stored; every offending field is named (`events.3.cost`). */
export class InvalidUsage extends Error {
  constructor(readonly fields: UsageFieldError[]) {
    super(fields.slice(0, 20).map((f) => `${f.field}: ${f.message}`).join('; ') + (fields.length > 20 ? `; and ${fields.length - 20} more` : ''));
    this.name = 'InvalidUsage';
  }
}

/**
 * Validation in front of the writer, shared by the library (`record`) and the HTTP API
 * (`accept`): a batch is checked whole before anything is queued, so a bad event means nothing
 * of its batch is written.
 */
export class UsageIngest {
  constructor(private readonly writer: UsageWriter, private readonly clock: Clock, private readonly retentionMs: number, private readonly maxPerRequest: number) {}

  validate(events: unknown[], prefix = 'events'): UsageEvent[] {
    if (events.length > this.maxPerRequest) throw new InvalidUsage([{ field: prefix, message: `expected at most ${this.maxPerRequest} events per request (usage.max_events_per_request), got ${events.length}` }]);
    const errors: UsageFieldError[] = [];
    const rows: UsageEvent[] = [];
    const now = this.clock.now();
    events.forEach((e, i) => {
      const r = usageEventSchema.safeParse(e);
      if (!r.success) {
        for (const issue of r.error.issues) {
          const path = [prefix, i, ...issue.path].join('.');
          errors.push(issue.code === 'unrecognized_keys' ? { field: `${path}.${issue.keys.join(',')}`, message: 'unknown field' } : { field: path, message: issue.message });
        }
        return;
      }
      const row = normalizeUsage(r.data, now, this.retentionMs);
      if (typeof row === 'string') errors.push({ field: `${prefix}.${i}.created_at`, message: row });
      else rows.push(row);
    });
    if (errors.length) throw new InvalidUsage(errors);
    return rows;
  }

  /** HTTP: resolves once every event is committed. */
  /** `accepted`: valid events taken; `stored`: rows written now; `duplicates`: events whose request_id was already stored (not written again). */
  async accept(events: unknown[]): Promise<{ accepted: number; stored: number; duplicates: number; outcome: RecordOutcome }> {
    const rows = this.validate(events);
    const r = await this.writer.writeCounted(rows);
    return { accepted: rows.length, stored: r.stored, duplicates: r.duplicates, outcome: r.outcome };
  }

  /** Library hot path: validates and queues one event; returns at once unless the queue is full (`sync` overflow). */
  record(event: unknown): RecordOutcome | Promise<RecordOutcome> {
    const [row] = this.validate([event], 'event');
    return this.writer.record(row!);
  }
}

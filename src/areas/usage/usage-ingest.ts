import { InvalidInput, type FieldError } from '../../errors/app-error.js';
import type { Clock } from '../../time/clock.js';
import type { UsageWriter, RecordOutcome } from './usage-writer.js';
import { normalizeUsage, usageEventSchema, type UsageEvent } from './usage-event.js';
import { isStorableText } from '../../store/poison-split.js';

/**
 * Validation in front of the writer, shared by the library (`record`) and the HTTP API
 * (`accept`): a batch is checked whole before anything is queued, so a bad event means nothing
 * of its batch is written.
 */
export class UsageIngest {
  constructor(
    private readonly writer: UsageWriter,
    private readonly clock: Clock,
    private readonly retentionMs: number,
    private readonly maxPerRequest: number,
  ) {}

  validate(events: unknown[], prefix = 'events'): UsageEvent[] {
    if (events.length > this.maxPerRequest)
      throw new InvalidInput([{ field: prefix, message: `expected at most ${this.maxPerRequest} events per request (usage.max_events_per_request), got ${events.length}` }]);
    const errors: FieldError[] = [];
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
      // Text PostgreSQL cannot store is refused here, for the library's hot path as for the API.
      const poison = Object.entries(r.data).filter(([, v]) => typeof v === 'string' && !isStorableText(v));
      if (poison.length) {
        for (const [k] of poison) errors.push({ field: `${prefix}.${i}.${k}`, message: 'text contains a NUL character or an unpaired UTF-16 surrogate, which cannot be stored' });
        return;
      }
      const row = normalizeUsage(r.data, now, this.retentionMs);
      if (typeof row === 'string') errors.push({ field: `${prefix}.${i}.created_at`, message: row });
      else rows.push(row);
    });
    if (errors.length) throw new InvalidInput(errors);
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

import type { Db } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';
import { lockedPick } from '../../../store/claim-queue.js';

/** One change as a gateway sees it (docs/change-stream.md, "The event"). */
export interface ChangeEvent {
  /** The event id: stable, the same when a crash makes the publisher send it again. Dedupe on it. */
  event_id: string;
  type: string;
  entity: string;
  /** The entity's id, as text (`<user_id>:<platform>` for a quota). */
  id: string;
  /** The entity's gateway-visible fields after the change (before it, for `.deleted`). */
  fields: Record<string, unknown>;
  /** For an update: the names of the fields that changed. */
  changed?: string[];
  /** When the change was written (database clock, ISO 8601). */
  at: string;
}

/** A published event with its place in the change log (`GET /api/v1/changes?after=`). */
export interface LoggedChange extends ChangeEvent {
  seq: number;
}

const parse = (v: unknown): unknown => (typeof v === 'string' ? JSON.parse(v) : v);

const toEvent = (r: Record<string, unknown>): ChangeEvent => {
  const e: ChangeEvent = {
    event_id: String(r.id),
    type: String(r.type),
    entity: String(r.entity),
    id: String(r.entity_id),
    fields: parse(r.fields) as Record<string, unknown>,
    at: toDate(r.at)!.toISOString(),
  };
  if (r.changed !== null && r.changed !== undefined) e.changed = parse(r.changed) as string[];
  return e;
};

/** The publisher's one-row lock: a replica that finds it held skips the pass. */
const LOCK_STATE = lockedPick({ select: 'seq', from: 'change_stream_state' });

/** Where a publish pass ended. `busy`: another replica holds the publisher's row lock. */
export interface PublishPass {
  published: number;
  busy: boolean;
}

/**
 * `change_events` as an outbox with one publisher at a time: a pass locks `change_stream_state`
 * (a locked pick: a second replica skips instead of waiting), reads the oldest unpublished events,
 * hands them to `send` (the Redis XADD), and only then gives them their `seq` and marks them
 * published, in the same transaction. A crash or an error in between rolls the marks back, so
 * the events are sent again by the next pass (at least once; same event ids).
 */
export class ChangeEvents {
  constructor(private readonly db: Db) {}

  async publish(limit: number, send: (events: ChangeEvent[]) => Promise<void>): Promise<PublishPass> {
    return this.db.tx(async (q) => {
      const { rows: st } = await q.query(LOCK_STATE);
      if (!st[0]) return { published: 0, busy: true };
      const { rows } = await q.query(`SELECT id, type, entity, entity_id, fields, changed, at FROM change_events WHERE seq IS NULL ORDER BY id LIMIT $1`, [limit]);
      if (!rows.length) return { published: 0, busy: false };
      const events = rows.map(toEvent);
      await send(events);
      const base = num(st[0].seq);
      await q.query(`UPDATE change_events c SET seq = x.seq, published_at = clock_timestamp() FROM unnest($1::bigint[], $2::bigint[]) AS x(id, seq) WHERE c.id = x.id`, [
        events.map((e) => e.event_id),
        events.map((_, i) => base + i + 1),
      ]);
      await q.query(`UPDATE change_stream_state SET seq = $1, published_at = clock_timestamp()`, [base + events.length]);
      return { published: events.length, busy: false };
    });
  }

  /** Published events after `seq`, in publish order; `oldest` is the lowest seq still kept (0 when none). */
  async after(seq: number, limit: number): Promise<{ events: LoggedChange[]; oldest: number; last: number }> {
    const { rows } = await this.db.query(`SELECT id, type, entity, entity_id, fields, changed, at, seq FROM change_events WHERE seq > $1 ORDER BY seq LIMIT $2`, [seq, limit]);
    const { rows: b } = await this.db.query(`SELECT (SELECT COALESCE(min(seq), 0) FROM change_events WHERE seq IS NOT NULL) AS oldest, (SELECT seq FROM change_stream_state) AS last`);
    return { events: rows.map((r) => ({ seq: num(r.seq), ...toEvent(r) })), oldest: num(b[0]!.oldest), last: num(b[0]!.last) };
  }

  /** Unpublished events and the age of the oldest (seconds, database clock; 0 when none). */
  async backlog(): Promise<{ count: number; lagSeconds: number }> {
    const { rows } = await this.db.query(`SELECT count(*) AS n, COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(at)), 0) AS lag FROM change_events WHERE seq IS NULL`);
    return { count: num(rows[0]!.n), lagSeconds: Math.max(0, num(rows[0]!.lag)) };
  }

  /** Deletes published events older than `retentionMs`, `batch` per statement; returns rows deleted. Unpublished events are never deleted. */
  async prune(retentionMs: number, batch: number, maxBatches: number): Promise<number> {
    let total = 0;
    for (let i = 0; i < maxBatches; i++) {
      const { rowCount } = await this.db.query(
        `DELETE FROM change_events WHERE id IN (
           SELECT id FROM change_events WHERE seq IS NOT NULL AND published_at < clock_timestamp() - $1 * interval '1 millisecond' ORDER BY seq LIMIT $2)`,
        [retentionMs, batch],
      );
      total += rowCount;
      if (rowCount < batch) break;
    }
    return total;
  }
}

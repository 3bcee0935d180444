import type { Db } from './db.js';
import { iso, num } from './db.js';

/** Where a dead letter came from: a pipeline that writes batches. */
export type DeadLetterSource = 'usage' | 'usage_spill' | 'quota_flush';

export interface DeadLetter {
  source: DeadLetterSource;
  reason: string;
  /** The row as the pipeline held it; serialised with JSON.stringify, so poison text stays escaped. */
  payload: unknown;
}

export interface DeadLetterView {
  id: number;
  source: string;
  reason: string;
  payload: string;
  created_at: string | null;
}

/** Text safe for a `text` column whatever it held (a database error can quote the poison). */
// eslint-disable-next-line no-control-regex -- NUL is exactly what this must find
const storable = (s: string) => s.replace(/\u0000/g, '\\u0000').replace(/[\ud800-\udfff]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);

/** `dead_letters`: rows the database refused for their content, kept with the reason, never retried. */
export class DeadLetters {
  constructor(private readonly db: Db) {}

  async add(letters: DeadLetter[]): Promise<void> {
    if (!letters.length) return;
    await this.db.query(`INSERT INTO dead_letters (source, reason, payload) SELECT * FROM unnest($1::text[], $2::text[], $3::text[])`, [
      letters.map((l) => l.source),
      letters.map((l) => storable(l.reason).slice(0, 1000)),
      letters.map((l) => storable(JSON.stringify(l.payload) ?? 'null')),
    ]);
  }

  async list(f: { source?: string; limit: number; afterId: number }): Promise<DeadLetterView[]> {
    const { rows } = await this.db.query(`SELECT id, source, reason, payload, created_at FROM dead_letters WHERE ($1::text IS NULL OR source = $1) AND id > $2 ORDER BY id LIMIT $3`, [
      f.source ?? null,
      f.afterId,
      f.limit,
    ]);
    return rows.map((r) => ({ id: num(r.id), source: String(r.source), reason: String(r.reason), payload: String(r.payload), created_at: iso(r.created_at) }));
  }
}

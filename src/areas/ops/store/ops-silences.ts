import type { Db } from '../../../store/db.js';
import { iso, num } from '../../../store/db.js';

export interface SilenceRow {
  id: number;
  rule_id: number | null;
  matchers: Record<string, string>;
  starts_at: string;
  ends_at: string;
  reason: string;
  author: string;
  created_at: string;
}

function toSilence(r: Record<string, unknown>): SilenceRow {
  return {
    id: num(r.id),
    rule_id: r.rule_id === null ? null : num(r.rule_id),
    matchers: r.matchers as Record<string, string>,
    starts_at: iso(r.starts_at)!,
    ends_at: iso(r.ends_at)!,
    reason: String(r.reason),
    author: String(r.author),
    created_at: iso(r.created_at)!,
  };
}

/** Alert silences: a rule id or label matchers, a time range, a reason and an author. */
export class OpsSilences {
  constructor(private readonly db: Db) {}

  async create(s: Omit<SilenceRow, 'id' | 'created_at'>): Promise<SilenceRow> {
    const { rows } = await this.db.query(`INSERT INTO ops_silences (rule_id, matchers, starts_at, ends_at, reason, author) VALUES ($1, $2::jsonb, $3, $4, $5, $6) RETURNING *`, [
      s.rule_id,
      JSON.stringify(s.matchers),
      s.starts_at,
      s.ends_at,
      s.reason,
      s.author,
    ]);
    return toSilence(rows[0]!);
  }

  /** Silences not yet ended (or every one with `all`). */
  async list(all = false): Promise<SilenceRow[]> {
    const { rows } = await this.db.query(`SELECT * FROM ops_silences WHERE $1::boolean OR ends_at > clock_timestamp() ORDER BY id`, [all]);
    return rows.map(toSilence);
  }

  async delete(id: number): Promise<boolean> {
    return (await this.db.query(`DELETE FROM ops_silences WHERE id = $1`, [id])).rowCount === 1;
  }
}

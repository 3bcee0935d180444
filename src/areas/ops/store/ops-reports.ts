import type { Db } from '../../../store/db.js';
import { iso, num, toDate } from '../../../store/db.js';
import { enqueueDeliveries } from '../../notifications/index.js';
import type { Intent } from './ops-alerts.js';

export const REPORT_KINDS = ['daily_summary', 'weekly_summary', 'error_digest', 'account_health'] as const;
export type ReportKind = (typeof REPORT_KINDS)[number];

export interface Report {
  id: number;
  name: string;
  kind: ReportKind;
  cron: string;
  timezone: string;
  recipients: string[];
  params: { min_count?: number; error_rate_threshold?: number };
  enabled: boolean;
  created_at: string;
  updated_at: string;
}
export type ReportInput = Omit<Report, 'id' | 'created_at' | 'updated_at'>;

const COLS = ['name', 'kind', 'cron', 'timezone', 'recipients', 'params', 'enabled'] as const;
const JSON_COLS = new Set(['recipients', 'params']);

function toReport(r: Record<string, unknown>): Report {
  return {
    id: num(r.id),
    name: String(r.name),
    kind: r.kind as ReportKind,
    cron: String(r.cron),
    timezone: String(r.timezone),
    recipients: r.recipients as string[],
    params: (r.params as Report['params']) ?? {},
    enabled: Boolean(r.enabled),
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  };
}
const param = (c: string, v: unknown) => (JSON_COLS.has(c) ? JSON.stringify(v) : v);
const cast = (c: string) => (JSON_COLS.has(c) ? '::jsonb' : '');

/** Report definitions and the per-occurrence record that makes each occurrence happen once. */
export class OpsReports {
  constructor(private readonly db: Db) {}

  async create(r: ReportInput): Promise<Report> {
    const { rows } = await this.db.query(
      `INSERT INTO ops_reports (${COLS.join(', ')}) VALUES (${COLS.map((c, i) => `$${i + 1}${cast(c)}`).join(', ')}) RETURNING *`,
      COLS.map((c) => param(c, r[c])),
    );
    return toReport(rows[0]!);
  }

  async update(id: number, patch: Partial<ReportInput>): Promise<Report | null> {
    const keys = COLS.filter((c) => patch[c] !== undefined);
    if (!keys.length) return this.get(id);
    const { rows } = await this.db.query(`UPDATE ops_reports SET ${keys.map((c, i) => `${c} = $${i + 2}${cast(c)}`).join(', ')}, updated_at = clock_timestamp() WHERE id = $1 RETURNING *`, [
      id,
      ...keys.map((c) => param(c, patch[c])),
    ]);
    return rows[0] ? toReport(rows[0]) : null;
  }

  async delete(id: number): Promise<boolean> {
    return (await this.db.query(`DELETE FROM ops_reports WHERE id = $1`, [id])).rowCount === 1;
  }

  async get(id: number): Promise<Report | null> {
    const { rows } = await this.db.query(`SELECT * FROM ops_reports WHERE id = $1`, [id]);
    return rows[0] ? toReport(rows[0]) : null;
  }

  async list(onlyEnabled = false): Promise<Report[]> {
    const { rows } = await this.db.query(`SELECT * FROM ops_reports WHERE ($1::boolean IS FALSE OR enabled) ORDER BY id`, [onlyEnabled]);
    return rows.map(toReport);
  }

  /** The newest occurrence recorded for each report. */
  async lastOccurrences(): Promise<Map<number, Date>> {
    const { rows } = await this.db.query<{ report_id: unknown; t: unknown }>(`SELECT report_id, max(occurrence) AS t FROM ops_report_runs GROUP BY report_id`);
    return new Map(rows.map((r) => [num(r.report_id), toDate(r.t)!]));
  }

  /**
   * Records an occurrence and its outbox intents in one transaction. The occurrence row is the
   * exactly-once guard: false when another round recorded it first (nothing is queued twice).
   * `coalesced` are older occurrences missed during downtime, recorded as such and not sent.
   */
  async record(reportId: number, occurrence: Date, status: 'queued' | 'skipped_empty', note: string | null, intents: Intent[], coalesced: Date[] = []): Promise<boolean> {
    return this.db.tx(async (q) => {
      const { rowCount } = await q.query(`INSERT INTO ops_report_runs (report_id, occurrence, status, note) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, [reportId, occurrence, status, note]);
      if (rowCount !== 1) return false;
      for (const c of coalesced) {
        await q.query(`INSERT INTO ops_report_runs (report_id, occurrence, status, note) VALUES ($1, $2, 'coalesced', $3) ON CONFLICT DO NOTHING`, [
          reportId,
          c,
          `missed while no replica ran; covered by ${occurrence.toISOString()}`,
        ]);
      }
      await enqueueDeliveries(q, intents);
      return true;
    });
  }

  async runs(reportId: number, limit = 50): Promise<Array<{ occurrence: string; status: string; note: string | null; created_at: string }>> {
    const { rows } = await this.db.query(`SELECT occurrence, status, note, created_at FROM ops_report_runs WHERE report_id = $1 ORDER BY occurrence DESC LIMIT $2`, [reportId, limit]);
    return rows.map((r) => ({ occurrence: iso(r.occurrence)!, status: String(r.status), note: (r.note as string) ?? null, created_at: iso(r.created_at)! }));
  }

  /** Errors of [from, to) by status code, read through the created_at index. */
  async errorsByStatus(from: Date, to: Date): Promise<Array<{ status: number; count: number }>> {
    const { rows } = await this.db.query<{ s: unknown; n: unknown }>(
      `SELECT status_code AS s, count(*) AS n FROM usage_logs WHERE created_at >= $1 AND created_at < $2 AND (status_code >= 500 OR status_code = 429) GROUP BY 1 ORDER BY 2 DESC`,
      [from, to],
    );
    return rows.map((r) => ({ status: num(r.s), count: num(r.n) }));
  }

  /** Accounts whose error rate in [from, to) exceeds `threshold`, from the hourly usage rollups. */
  async unhealthyAccounts(from: Date, to: Date, threshold: number): Promise<Array<{ account_id: string; requests: number; errors: number; error_rate: number }>> {
    const { rows } = await this.db.query<{ account_id: string; r: unknown; e: unknown }>(
      `SELECT account_id, sum(requests) AS r, sum(errors) AS e FROM usage_hourly WHERE bucket >= $1 AND bucket < $2 AND account_id <> '' GROUP BY 1
       HAVING sum(requests) > 0 AND sum(errors)::float8 / sum(requests) > $3 ORDER BY sum(errors)::float8 / sum(requests) DESC LIMIT 100`,
      [from, to, threshold],
    );
    return rows.map((r) => ({ account_id: r.account_id, requests: num(r.r), errors: num(r.e), error_rate: num(r.e) / num(r.r) }));
  }
}

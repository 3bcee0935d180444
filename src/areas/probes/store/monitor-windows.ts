import type { Db } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';

/**
 * Which monitors an alert rule watches. Every part given must hold (AND); an empty selector
 * selects every enabled monitor. `labels` matches monitors whose labels include all of its pairs.
 */
export interface MonitorSelector {
  monitor?: string;
  monitor_id?: number;
  labels?: Record<string, string>;
}

/** One selected monitor's probes over a window. `probes` 0 means no probe in the window (unknown). */
export interface MonitorWindow {
  id: number;
  name: string;
  labels: Record<string, string>;
  probes: number;
  ok: number;
  /** The worst minute's p95 latency in the window (the open minute's from raw results). */
  p95Ms: number | null;
  /** The newest probe the window holds (for a rolled-up minute, the minute's start). */
  newest: Date | null;
}

const WATERMARK = 'monitor_rollups';

/**
 * Monitor probes folded over an alert rule's window, for the ops alert evaluator. The window is
 * [now - window, now) on the database clock (probe times are written on it). Whole minutes the
 * rollup watermark has passed are read from `monitor_rollups`; the rest (the window's leading
 * partial minute, the open minute, and anything after a lagging watermark) from raw
 * `monitor_results`, never both for one probe. A result stored after its minute was rolled up is
 * counted when the rollup's trailing re-aggregation next passes it.
 */
export class MonitorWindows {
  constructor(private readonly db: Db) {}

  /** The enabled monitors a selector matches, with their probes over the last `windowMs`; one statement. */
  async window(s: MonitorSelector, windowMs: number): Promise<MonitorWindow[]> {
    const { rows } = await this.db.query(
      `WITH sel AS (
         SELECT id, name, labels FROM monitors
         WHERE enabled AND ($1::bigint IS NULL OR id = $1) AND ($2::text IS NULL OR name = $2) AND labels @> $3::jsonb),
       b AS (
         SELECT now() - make_interval(secs => $4::double precision / 1000) AS w_from, now() AS w_to,
           COALESCE((SELECT upto FROM probe_watermarks WHERE name = $5), '-infinity'::timestamptz) AS upto),
       r AS (SELECT w_from, w_to, rs, GREATEST(rs, LEAST(upto, date_trunc('minute', w_to))) AS re
             FROM (SELECT *, date_trunc('minute', w_from + interval '1 minute' - interval '1 microsecond') AS rs FROM b) x),
       roll AS (
         SELECT m.monitor_id, sum(m.probes) AS probes, sum(m.ok) AS ok, max(m.p95_ms) AS p95, max(m.minute) AS newest
         FROM monitor_rollups m, r WHERE m.monitor_id IN (SELECT id FROM sel) AND m.minute >= r.rs AND m.minute < r.re
         GROUP BY m.monitor_id),
       raw AS (
         SELECT x.monitor_id, count(*) AS probes, count(*) FILTER (WHERE x.ok) AS ok,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY x.latency_ms) AS p95, max(x.started_at) AS newest
         FROM monitor_results x, r WHERE x.monitor_id IN (SELECT id FROM sel)
           AND x.started_at >= r.w_from AND x.started_at < r.w_to AND (x.started_at < r.rs OR x.started_at >= r.re)
         GROUP BY x.monitor_id)
       SELECT s.id, s.name, s.labels, COALESCE(roll.probes, 0) + COALESCE(raw.probes, 0) AS probes, COALESCE(roll.ok, 0) + COALESCE(raw.ok, 0) AS ok,
         GREATEST(roll.p95, raw.p95) AS p95, GREATEST(roll.newest, raw.newest) AS newest
       FROM sel s LEFT JOIN roll ON roll.monitor_id = s.id LEFT JOIN raw ON raw.monitor_id = s.id ORDER BY s.id`,
      [s.monitor_id ?? null, s.monitor ?? null, JSON.stringify(s.labels ?? {}), windowMs, WATERMARK],
    );
    return rows.map((r) => ({
      id: num(r.id),
      name: String(r.name),
      labels: (typeof r.labels === 'string' ? JSON.parse(r.labels) : r.labels) as Record<string, string>,
      probes: num(r.probes),
      ok: num(r.ok),
      p95Ms: r.p95 === null ? null : num(r.p95),
      newest: toDate(r.newest),
    }));
  }

  /** Monitors (enabled or not) with this id and/or name, for checking a rule's selector when it is written. */
  async named(s: { monitor?: string; monitor_id?: number }, limit = 10): Promise<Array<{ id: number; name: string }>> {
    const { rows } = await this.db.query(`SELECT id, name FROM monitors WHERE ($1::bigint IS NULL OR id = $1) AND ($2::text IS NULL OR name = $2) ORDER BY id LIMIT $3`, [
      s.monitor_id ?? null,
      s.monitor ?? null,
      limit,
    ]);
    return rows.map((r) => ({ id: num(r.id), name: String(r.name) }));
  }
}

import type { Db } from '../../../store/db.js';
import { iso, num, toDate } from '../../../store/db.js';

const WATERMARK = 'monitor_rollups';

export interface RawPoint {
  started_at: string;
  scheduled_for: string;
  ok: boolean;
  status: number | null;
  latency_ms: number;
  ttfb_ms: number | null;
  error_class: string | null;
}

export interface MinutePoint {
  minute: string;
  probes: number;
  ok: number;
  availability: number;
  p50_ms: number | null;
  p95_ms: number | null;
  errors: Record<string, number>;
}

/** Fenced out: a newer round of the rollup job has written the watermark. */
export class WatermarkFenced extends Error {}

/**
 * Probe history: raw results, minute rollups from a fenced watermark, and retention. The rollup
 * re-aggregates a trailing window on every pass (a result stored late, e.g. by a slow replica,
 * still lands in its minute) and only complete minutes.
 */
export class MonitorHistory {
  constructor(private readonly db: Db) {}

  /**
   * Aggregates [watermark - trailing, the current minute) and moves the watermark, in one
   * transaction that first checks the fence: a round that lost its lease writes nothing.
   * A first run starts `bootstrapMs` back; one pass covers at most `maxSpanMs`.
   */
  async rollUp(fence: number, o: { trailingMs: number; bootstrapMs: number; maxSpanMs: number }): Promise<{ minutes: number; rows: number; upto: Date }> {
    return this.db.tx(async (q) => {
      const wm = await q.query(
        `INSERT INTO probe_watermarks (name, upto, fence) VALUES ($1, date_trunc('minute', now() - make_interval(secs => $2::double precision / 1000)), $3)
         ON CONFLICT (name) DO UPDATE SET fence = $3, updated_at = clock_timestamp() WHERE probe_watermarks.fence <= $3
         RETURNING upto`,
        [WATERMARK, o.bootstrapMs, fence],
      );
      if (!wm.rows[0]) throw new WatermarkFenced(`rollup watermark is held by a newer fence than ${fence}`);
      const from = new Date(toDate(wm.rows[0].upto)!.getTime() - o.trailingMs);
      const { rows } = await q.query(
        `SELECT date_trunc('minute', now()) AS now_min, LEAST(date_trunc('minute', now()), $1::timestamptz + make_interval(secs => $2::double precision / 1000)) AS upto`,
        [from, o.maxSpanMs],
      );
      const upto = toDate(rows[0]!.upto)!;
      const r = await q.query(
        `INSERT INTO monitor_rollups (monitor_id, minute, probes, ok, p50_ms, p95_ms, errors)
         SELECT monitor_id, minute, count(*), count(*) FILTER (WHERE ok),
           percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms), percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms),
           COALESCE((SELECT jsonb_object_agg(ec, n) FROM (SELECT e.error_class AS ec, count(*) AS n FROM monitor_results e
                     WHERE e.monitor_id = g.monitor_id AND date_trunc('minute', e.started_at) = g.minute AND e.error_class IS NOT NULL GROUP BY e.error_class) x), '{}')
         FROM (SELECT monitor_id, date_trunc('minute', started_at) AS minute, ok, latency_ms FROM monitor_results WHERE started_at >= $1 AND started_at < $2) g
         GROUP BY monitor_id, minute
         ON CONFLICT (monitor_id, minute) DO UPDATE SET probes = EXCLUDED.probes, ok = EXCLUDED.ok, p50_ms = EXCLUDED.p50_ms, p95_ms = EXCLUDED.p95_ms, errors = EXCLUDED.errors`,
        [from, upto],
      );
      await q.query(`UPDATE probe_watermarks SET upto = GREATEST(upto, $2) WHERE name = $1 AND fence = $3`, [WATERMARK, upto, fence]);
      return { minutes: Math.max(0, Math.round((upto.getTime() - from.getTime()) / 60_000)), rows: r.rowCount, upto };
    });
  }

  /** Deletes raw results older than `rawMs` and rollups older than `rollupMs`, at most `batch` rows of each. */
  async prune(rawMs: number, rollupMs: number, batch: number): Promise<number> {
    const raw = await this.db.query(`DELETE FROM monitor_results WHERE id IN (SELECT id FROM monitor_results WHERE started_at < now() - make_interval(secs => $1::double precision / 1000) LIMIT $2)`, [
      rawMs,
      batch,
    ]);
    const rolled = await this.db.query(
      `DELETE FROM monitor_rollups WHERE (monitor_id, minute) IN (SELECT monitor_id, minute FROM monitor_rollups WHERE minute < now() - make_interval(secs => $1::double precision / 1000) LIMIT $2)`,
      [rollupMs, batch],
    );
    return raw.rowCount + rolled.rowCount;
  }

  async raw(monitorId: number, from: Date, to: Date, limit: number): Promise<RawPoint[]> {
    const { rows } = await this.db.query(
      `SELECT started_at, scheduled_for, ok, status, latency_ms, ttfb_ms, error_class FROM monitor_results
       WHERE monitor_id = $1 AND started_at >= $2 AND started_at < $3 ORDER BY started_at LIMIT $4`,
      [monitorId, from, to, limit],
    );
    return rows.map((r) => ({
      started_at: iso(r.started_at)!,
      scheduled_for: iso(r.scheduled_for)!,
      ok: Boolean(r.ok),
      status: r.status === null ? null : num(r.status),
      latency_ms: num(r.latency_ms),
      ttfb_ms: r.ttfb_ms === null ? null : num(r.ttfb_ms),
      error_class: (r.error_class as string) ?? null,
    }));
  }

  async minutes(monitorId: number, from: Date, to: Date, limit: number): Promise<MinutePoint[]> {
    const { rows } = await this.db.query(
      `SELECT minute, probes, ok, p50_ms, p95_ms, errors FROM monitor_rollups WHERE monitor_id = $1 AND minute >= date_trunc('minute', $2::timestamptz) AND minute < $3
       ORDER BY minute LIMIT $4`,
      [monitorId, from, to, limit],
    );
    return rows.map((r) => ({
      minute: iso(r.minute)!,
      probes: num(r.probes),
      ok: num(r.ok),
      availability: num(r.probes) ? num(r.ok) / num(r.probes) : 0,
      p50_ms: r.p50_ms === null ? null : num(r.p50_ms),
      p95_ms: r.p95_ms === null ? null : num(r.p95_ms),
      errors: (typeof r.errors === 'string' ? JSON.parse(r.errors) : r.errors) as Record<string, number>,
    }));
  }
}

import type { Db } from './db.js';
import { iso, num, toDate } from './db.js';
import type { SecretBox } from './secret-box.js';
import { SetClause } from './set-clause.js';

const API_KEY = 'monitor-api-key';

/** What the API may see of a monitor: never the key, only whether one is set. */
export interface MonitorView {
  id: number;
  name: string;
  base_url: string | null;
  model: string;
  account_id: number | null;
  has_api_key: boolean;
  interval_ms: number;
  timeout_ms: number;
  jitter_ms: number;
  enabled: boolean;
  labels: Record<string, string>;
  next_due_at: string;
  last_probe: { at: string | null; status: number | null; error_class: string | null; latency_ms: number | null };
  created_at: string;
  updated_at: string;
}

export interface MonitorInput {
  name: string;
  baseUrl: string | null;
  model: string;
  apiKey: string | null;
  accountId: number | null;
  intervalMs: number;
  timeoutMs: number;
  jitterMs: number;
  enabled: boolean;
  labels: Record<string, string>;
}

/** A monitor claimed for one probe: its fence, the slot it is for, and the key opened. */
export interface ClaimedMonitor {
  id: number;
  fence: number;
  scheduledFor: Date;
  claimedAt: Date;
  leaseUntil: Date;
  /** Whole intervals that passed unprobed before this claim (the replica pool was full, or replicas were down). */
  missed: number;
  baseUrl: string | null;
  model: string;
  apiKey: string | null;
  accountId: number | null;
  intervalMs: number;
  timeoutMs: number;
}

export interface ProbeRecord {
  monitorId: number;
  fence: number;
  scheduledFor: Date;
  startedAt: Date;
  ok: boolean;
  status: number | null;
  latencyMs: number;
  ttfbMs: number | null;
  errorClass: string | null;
  missed: number;
}

const VIEW = `id, name, base_url, model, account_id, api_key_sealed IS NOT NULL AS has_api_key, interval_ms, timeout_ms, jitter_ms, enabled, labels,
  next_due_at, last_probe_at, last_status, last_error_class, last_latency_ms, created_at, updated_at`;

function toView(r: Record<string, unknown>): MonitorView {
  return {
    id: num(r.id),
    name: String(r.name),
    base_url: (r.base_url as string) ?? null,
    model: String(r.model),
    account_id: r.account_id === null || r.account_id === undefined ? null : num(r.account_id),
    has_api_key: Boolean(r.has_api_key),
    interval_ms: num(r.interval_ms),
    timeout_ms: num(r.timeout_ms),
    jitter_ms: num(r.jitter_ms),
    enabled: Boolean(r.enabled),
    labels: (typeof r.labels === 'string' ? JSON.parse(r.labels) : r.labels) as Record<string, string>,
    next_due_at: iso(r.next_due_at)!,
    last_probe: {
      at: iso(r.last_probe_at),
      status: r.last_status === null ? null : num(r.last_status),
      error_class: (r.last_error_class as string) ?? null,
      latency_ms: r.last_latency_ms === null ? null : num(r.last_latency_ms),
    },
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  };
}

/**
 * Channel monitors. The due time lives here, so the whole cluster shares one schedule: a replica
 * claims due monitors (`claim`), probes them, and hands the results back (`complete`), which
 * releases each lease only under the fence it was claimed with.
 */
export class Monitors {
  constructor(
    private readonly db: Db,
    private readonly box: SecretBox,
  ) {}

  /** The first due time is `now + jitter_offset`: jitter spreads monitors' phases, never a monitor's own interval. */
  async create(m: MonitorInput, phaseMs: number): Promise<MonitorView> {
    const { rows } = await this.db.query(
      `INSERT INTO monitors (name, base_url, model, api_key_sealed, account_id, interval_ms, timeout_ms, jitter_ms, enabled, labels, next_due_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, clock_timestamp() + make_interval(secs => $11::double precision / 1000)) RETURNING ${VIEW}`,
      [m.name, m.baseUrl, m.model, m.apiKey === null ? null : this.box.seal(m.apiKey, API_KEY), m.accountId, m.intervalMs, m.timeoutMs, m.jitterMs, m.enabled, JSON.stringify(m.labels), phaseMs],
    );
    return toView(rows[0]!);
  }

  async get(id: number): Promise<MonitorView | null> {
    const { rows } = await this.db.query(`SELECT ${VIEW} FROM monitors WHERE id = $1`, [id]);
    return rows[0] ? toView(rows[0]) : null;
  }

  async list(f: { limit: number; afterId: number }): Promise<MonitorView[]> {
    const { rows } = await this.db.query(`SELECT ${VIEW} FROM monitors WHERE id > $1 ORDER BY id LIMIT $2`, [f.afterId, f.limit]);
    return rows.map(toView);
  }

  /** An edit that changes the schedule (interval, enabled) makes the monitor due again at `now + phase`, on the next claim. */
  async update(id: number, p: Partial<MonitorInput>, phaseMs: number | null): Promise<MonitorView | null> {
    const c = new SetClause(id);
    if (p.name !== undefined) c.set('name', p.name);
    if (p.baseUrl !== undefined) c.set('base_url', p.baseUrl);
    if (p.model !== undefined) c.set('model', p.model);
    if (p.apiKey !== undefined) c.set('api_key_sealed', p.apiKey === null ? null : this.box.seal(p.apiKey, API_KEY));
    if (p.accountId !== undefined) c.set('account_id', p.accountId);
    if (p.intervalMs !== undefined) c.set('interval_ms', p.intervalMs);
    if (p.timeoutMs !== undefined) c.set('timeout_ms', p.timeoutMs);
    if (p.jitterMs !== undefined) c.set('jitter_ms', p.jitterMs);
    if (p.enabled !== undefined) c.set('enabled', p.enabled);
    if (p.labels !== undefined) c.set('labels', JSON.stringify(p.labels));
    if (phaseMs !== null) c.raw(`next_due_at = clock_timestamp() + make_interval(secs => ${Math.max(0, Math.round(phaseMs))}::double precision / 1000)`);
    if (c.empty) return this.get(id);
    const { rows } = await this.db.query(`UPDATE monitors SET ${c} WHERE id = $1 RETURNING ${VIEW}`, c.params);
    return rows[0] ? toView(rows[0]) : null;
  }

  async delete(id: number): Promise<boolean> {
    const { rows } = await this.db.query(
      `WITH gone AS (DELETE FROM monitors WHERE id = $1 RETURNING id), r AS (DELETE FROM monitor_results WHERE monitor_id IN (SELECT id FROM gone)),
         h AS (DELETE FROM monitor_rollups WHERE monitor_id IN (SELECT id FROM gone))
       SELECT id FROM gone`,
      [id],
    );
    return rows.length === 1;
  }

  /**
   * Claims up to `limit` due monitors for `owner` in one statement. SKIP LOCKED lets replicas
   * claim side by side without waiting on each other; a live lease means the monitor's previous
   * probe may still run, so it is not due (no overlap). The claim moves next_due_at to the first
   * slot after now on the monitor's own phase, so each slot is claimed at most once cluster-wide;
   * slots that passed unprobed are reported as `missed`, never probed in a burst.
   */
  async claim(owner: string, limit: number, leaseGraceMs: number): Promise<ClaimedMonitor[]> {
    const { rows } = await this.db.query(
      `WITH due AS (
         SELECT id, next_due_at, interval_ms FROM monitors
         WHERE enabled AND next_due_at <= now() AND (lease_until IS NULL OR lease_until <= now())
         ORDER BY next_due_at LIMIT $2 FOR UPDATE SKIP LOCKED),
       step AS (SELECT id, next_due_at, floor(extract(epoch FROM now() - next_due_at) * 1000 / interval_ms)::bigint AS missed FROM due)
       UPDATE monitors m SET fence = m.fence + 1, lease_owner = $1,
         lease_until = now() + make_interval(secs => (m.timeout_ms + $3::double precision) / 1000),
         next_due_at = m.next_due_at + make_interval(secs => m.interval_ms::double precision * (step.missed + 1) / 1000)
       FROM step WHERE m.id = step.id
       RETURNING m.id, m.fence, step.next_due_at AS scheduled_for, now() AS claimed_at, m.lease_until, step.missed,
         m.base_url, m.model, m.api_key_sealed, m.account_id, m.interval_ms, m.timeout_ms`,
      [owner, limit, leaseGraceMs],
    );
    return rows.map((r) => ({
      id: num(r.id),
      fence: num(r.fence),
      scheduledFor: toDate(r.scheduled_for)!,
      claimedAt: toDate(r.claimed_at)!,
      leaseUntil: toDate(r.lease_until)!,
      missed: num(r.missed),
      baseUrl: (r.base_url as string) ?? null,
      model: String(r.model),
      apiKey: r.api_key_sealed ? this.box.open(String(r.api_key_sealed), API_KEY) : null,
      accountId: r.account_id === null ? null : num(r.account_id),
      intervalMs: num(r.interval_ms),
      timeoutMs: num(r.timeout_ms),
    }));
  }

  /**
   * Stores a batch of results and releases their leases, in one statement. A lease is released
   * only under the fence it was claimed with; a result whose fence was overtaken (the lease
   * expired and another replica claimed the monitor) is stored with `fenced_out` set.
   */
  /** Returns how many results were fenced out. */
  async complete(owner: string, batch: ProbeRecord[]): Promise<number> {
    if (batch.length === 0) return 0;
    const col = <T>(f: (p: ProbeRecord) => T) => batch.map(f);
    const { rows } = await this.db.query(
      `WITH r AS (
         SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::timestamptz[], $5::timestamptz[], $6::boolean[], $7::int[], $8::int[], $9::int[], $10::text[], $11::int[])
           AS t(monitor_id, fence, scheduled_for, started_at, ok, status, latency_ms, ttfb_ms, error_class, missed)),
       rel AS (
         UPDATE monitors m SET lease_owner = NULL, lease_until = NULL, last_probe_at = r.started_at, last_status = r.status,
           last_error_class = r.error_class, last_latency_ms = r.latency_ms
         FROM r WHERE m.id = r.monitor_id AND m.fence = r.fence RETURNING m.id)
       INSERT INTO monitor_results (monitor_id, fence, scheduled_for, started_at, ok, status, latency_ms, ttfb_ms, error_class, instance_id, fenced_out, missed)
       SELECT r.monitor_id, r.fence, r.scheduled_for, r.started_at, r.ok, r.status, r.latency_ms, r.ttfb_ms, r.error_class, $1,
         NOT EXISTS (SELECT 1 FROM rel WHERE rel.id = r.monitor_id), r.missed FROM r
       RETURNING fenced_out`,
      [
        owner,
        col((p) => p.monitorId),
        col((p) => p.fence),
        col((p) => p.scheduledFor),
        col((p) => p.startedAt),
        col((p) => p.ok),
        col((p) => p.status),
        col((p) => p.latencyMs),
        col((p) => p.ttfbMs),
        col((p) => p.errorClass),
        col((p) => p.missed),
      ],
    );
    return rows.filter((r) => Boolean(r.fenced_out)).length;
  }

  /**
   * For channel_monitor's health: enabled, unleased monitors a whole interval of their own past due
   * (a probe missed, not a busy second), and since when the oldest has waited. Read-only.
   */
  async missedIntervals(): Promise<{ missed: number; oldestDueAt: Date | null }> {
    const { rows } = await this.db.query(
      `SELECT count(*) AS n, min(next_due_at) AS oldest FROM monitors
        WHERE enabled AND next_due_at <= now() - make_interval(secs => interval_ms::double precision / 1000) AND (lease_until IS NULL OR lease_until < now())`,
    );
    return { missed: num(rows[0]!.n), oldestDueAt: toDate(rows[0]!.oldest) };
  }

  /** Enabled monitors due now, and those due for longer than `overdueMs` (the pool cannot keep up, or no replica runs). */
  async dueCounts(overdueMs: number): Promise<{ due: number; overdue: number; enabled: number }> {
    const { rows } = await this.db.query(
      `SELECT count(*) FILTER (WHERE next_due_at <= now()) AS due,
              count(*) FILTER (WHERE next_due_at <= now() - make_interval(secs => $1::double precision / 1000)) AS overdue, count(*) AS enabled
       FROM monitors WHERE enabled`,
      [overdueMs],
    );
    return { due: num(rows[0]!.due), overdue: num(rows[0]!.overdue), enabled: num(rows[0]!.enabled) };
  }
}

// Every statement on `monitors` (CRUD, the spread claim with its half-interval skip, results,
// overdue reads) in one repository, so the claim and the lease rules are read together; the shapes are monitor-types.ts.
import type { Db } from '../../../store/db.js';
import { iso, num, toDate } from '../../../store/db.js';
import type { SecretBox } from '../../../store/secret-box.js';
import { SetClause } from '../../../store/set-clause.js';
import { heldBy, leaseFree, lockedPick, type LeaseTable } from '../../../store/claim-queue.js';
import type { ClaimedMonitor, MonitorClaim, MonitorInput, MonitorView, ProbeRecord } from './monitor-types.js';

import type { MonitorProvider } from '../../accounts/index.js';
export type { ClaimedMonitor, MonitorClaim, MonitorInput, MonitorView, ProbeRecord } from './monitor-types.js';

const API_KEY = 'monitor-api-key'; /** The probe lease (`claim-queue.ts`); the claim is written out below because a late slot is skipped without taking the lease. */
const MONITORS: LeaseTable = { table: 'monitors', key: 'id', owner: 'lease_owner', until: 'lease_until', fence: 'fence', aliveKey: 'lease_alive_key' };
/** The claim's candidates: enabled, due by `n.t`, lease free; the oldest due first, at most `$2`, rows other claimers hold passed over. */
const DUE_PICK = lockedPick({
  select: 'id, next_due_at, interval_ms, due_now',
  from: 'monitors, n',
  where: `enabled AND next_due_at <= n.t AND ${leaseFree(MONITORS, 'n.t')}`,
  order: 'next_due_at',
  limit: '$2',
  of: 'monitors',
});

/**
 * A monitor's phase within its interval: Fibonacci (Knuth multiplicative) hashing of its id,
 * `((id × 2654435769) mod 2³²) × interval / 2³²`, in integers so PostgreSQL and this function
 * agree to the millisecond. Like Prometheus's scrape offsets, the phase is stable (the same on
 * every replica, whenever the monitor was created); unlike a general hash, consecutive ids land
 * far apart (the three-gap theorem), so N monitors created together fire at N evenly spaced
 * instants, not at the instant they were created.
 */
export function spreadPhase(id: number, intervalMs: number): number {
  return Number((((BigInt(id) * 2654435769n) % 4294967296n) * BigInt(intervalMs)) / 4294967296n);
}
const PHASE_SQL = (id: string, interval: string) => `(((${id}::bigint * 2654435769) % 4294967296) * ${interval}::bigint / 4294967296)`;
/** Epoch milliseconds of a timestamptz, as bigint. */
const EPOCH_MS = (t: string) => `floor(extract(epoch FROM ${t}) * 1000)::bigint`;
/** The first phase slot of a monitor at or after `t` (epoch ms), as timestamptz. */
const SLOT_AT_OR_AFTER = (id: string, interval: string, tMs: string) =>
  `to_timestamp((${PHASE_SQL(id, interval)} + ceil((${tMs} - ${PHASE_SQL(id, interval)})::numeric / ${interval}) * ${interval})::double precision / 1000)`;

const VIEW = `id, name, base_url, model, account_id, api_key_sealed IS NOT NULL AS has_api_key, provider, challenge, degraded_after_ms, interval_ms, timeout_ms, jitter_ms, enabled, labels,
  next_due_at, last_probe_at, last_status, last_error_class, last_latency_ms, created_at, updated_at`;

function toView(r: Record<string, unknown>): MonitorView {
  return {
    id: num(r.id),
    name: String(r.name),
    base_url: (r.base_url as string) ?? null,
    model: String(r.model),
    account_id: r.account_id === null || r.account_id === undefined ? null : num(r.account_id),
    has_api_key: Boolean(r.has_api_key),
    // The column keeps its default beside an account, whose platform decides: shown as none.
    provider: r.account_id === null || r.account_id === undefined ? (String(r.provider) as MonitorProvider) : null,
    challenge: Boolean(r.challenge),
    degraded_after_ms: r.degraded_after_ms === null || r.degraded_after_ms === undefined ? null : num(r.degraded_after_ms),
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

  /** Due at once (`due_now`): a new monitor is probed straight away, then on its phase slots. `at` replaces the database clock (tests). */
  async create(m: MonitorInput, at: Date | null = null): Promise<MonitorView> {
    const { rows } = await this.db.query(
      `INSERT INTO monitors (name, base_url, model, api_key_sealed, account_id, interval_ms, timeout_ms, jitter_ms, enabled, labels, next_due_at, due_now, provider, challenge, degraded_after_ms)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, COALESCE($11::timestamptz, clock_timestamp()), true, $12, $13, $14) RETURNING ${VIEW}`,
      [
        m.name,
        m.baseUrl,
        m.model,
        m.apiKey === null ? null : this.box.seal(m.apiKey, API_KEY),
        m.accountId,
        m.intervalMs,
        m.timeoutMs,
        m.jitterMs,
        m.enabled,
        JSON.stringify(m.labels),
        at,
        m.provider ?? 'openai',
        m.challenge ?? false,
        m.degradedAfterMs ?? null,
      ],
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

  /** An edit that changes what or how often is probed makes the monitor due at once (`due_now`), then on its phase slots. */
  async update(id: number, p: Partial<MonitorInput>, probeNow: boolean, at: Date | null = null): Promise<MonitorView | null> {
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
    if (p.provider !== undefined) c.set('provider', p.provider);
    if (p.challenge !== undefined) c.set('challenge', p.challenge);
    if (p.degradedAfterMs !== undefined) c.set('degraded_after_ms', p.degradedAfterMs);
    if (probeNow) c.raw(at ? `next_due_at = '${at.toISOString()}'::timestamptz, due_now = true` : `next_due_at = clock_timestamp(), due_now = true`);
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
   * Claims up to `limit` due monitors for `owner` in one statement. A locked pick lets replicas
   * claim side by side without waiting on each other; a live lease means the monitor's previous
   * probe may still run, so it is not due (no overlap), unless the lease's holder is dead (its
   * liveness key `aliveKey` is held by no session any more: taken over at once, not after the lease).
   *
   * Spread (issue 24): a monitor's slots are `phase + k × interval` (`spreadPhase`). A slot
   * claimed more than half an interval late is not probed: it is skipped and counted as missed,
   * and the monitor moves to its next slot, so two probes of one monitor are never closer than
   * half an interval. The immediate probe of a create or edit (`due_now`) is never skipped; the
   * slot after it is the first one at least half an interval later. Each slot is claimed at most
   * once cluster-wide. `at` replaces the database clock (tests).
   *
   * Not `claimDue` (store/claim-queue.ts): a skipped row is locked and moved on without taking
   * the lease, which a claim plan cannot say. Its invariants are the claim queue's all the same:
   * rows are picked by `lockedPick` under `leaseFree`, and a claim bumps the fence.
   */
  async claim(owner: string, limit: number, leaseGraceMs: number, aliveKey: number | null = null, at: Date | null = null): Promise<MonitorClaim> {
    const { rows } = await this.db.query(
      `WITH n AS (SELECT COALESCE($4::timestamptz, now()) AS t),
       due AS (${DUE_PICK}),
       behind AS (
         SELECT due.id, due.next_due_at, due.due_now, due.interval_ms, n.t,
           floor((${EPOCH_MS('n.t')} - ${EPOCH_MS('due.next_due_at')})::numeric / due.interval_ms)::bigint AS behind
         FROM due, n),
       late AS (
         SELECT b.*, NOT b.due_now AND ${EPOCH_MS('b.t')} - ${EPOCH_MS('b.next_due_at')} - b.behind * b.interval_ms > b.interval_ms / 2 AS skip,
           CASE WHEN b.due_now THEN b.next_due_at ELSE b.next_due_at + make_interval(secs => b.behind * b.interval_ms::double precision / 1000) END AS slot,
           ${SLOT_AT_OR_AFTER('b.id', 'b.interval_ms', `(${EPOCH_MS('b.t')} + CASE WHEN b.due_now THEN (b.interval_ms + 1) / 2 ELSE 1 END)`)} AS next_slot
         FROM behind b),
       step AS (SELECT * FROM late)
       UPDATE monitors m SET
         fence = CASE WHEN step.skip THEN m.fence ELSE m.fence + 1 END,
         lease_owner = CASE WHEN step.skip THEN m.lease_owner ELSE $1 END,
         lease_alive_key = CASE WHEN step.skip THEN m.lease_alive_key ELSE $5::int END,
         lease_until = CASE WHEN step.skip THEN m.lease_until ELSE step.t + make_interval(secs => (m.timeout_ms + $3::double precision) / 1000) END,
         next_due_at = step.next_slot, due_now = false
       FROM step WHERE m.id = step.id
       RETURNING m.id, m.fence, step.slot AS scheduled_for, step.t AS claimed_at, m.lease_until, step.skip,
         CASE WHEN step.skip THEN step.behind + 1 WHEN step.due_now THEN 0 ELSE step.behind END AS missed,
         m.base_url, m.model, m.api_key_sealed, m.account_id, m.interval_ms, m.timeout_ms, m.provider, m.challenge, m.degraded_after_ms, step.due_now`,
      [owner, limit, leaseGraceMs, at, aliveKey],
    );
    const claimed: ClaimedMonitor[] = [];
    let skipped = 0;
    for (const r of rows) {
      if (r.skip) {
        skipped += num(r.missed);
        continue;
      }
      claimed.push({
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
        provider: String(r.provider) as MonitorProvider,
        challenge: Boolean(r.challenge),
        degradedAfterMs: r.degraded_after_ms === null ? null : num(r.degraded_after_ms),
        dueNow: r.due_now === true,
      });
    }
    return { claimed, skipped };
  }

  /**
   * Stores a batch of results and releases their leases, in one statement. A lease is released
   * only under the fence it was claimed with; a result whose fence was overtaken (the lease
   * expired and another replica claimed the monitor) is stored with `fenced_out` set. Returns how many were.
   */
  async complete(owner: string, batch: ProbeRecord[]): Promise<number> {
    if (batch.length === 0) return 0;
    const col = <T>(f: (p: ProbeRecord) => T) => batch.map(f);
    const { rows } = await this.db.query(
      `WITH r AS (
         SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::timestamptz[], $5::timestamptz[], $6::boolean[], $7::int[], $8::int[], $9::int[], $10::text[], $11::int[], $12::timestamptz[])
           AS t(monitor_id, fence, scheduled_for, started_at, ok, status, latency_ms, ttfb_ms, error_class, missed, not_before)),
       rel AS (
         UPDATE monitors m SET lease_owner = NULL, lease_until = NULL, last_probe_at = r.started_at, last_status = r.status,
           last_error_class = r.error_class, last_latency_ms = r.latency_ms,
           -- After the immediate probe of a create or edit: its slot was placed half an interval after the claim, but the
           -- probe may have gone out later (a token fetched first, a first connection); the next waits half an interval after it ended.
           next_due_at = CASE WHEN r.not_before IS NULL THEN m.next_due_at
                              ELSE GREATEST(m.next_due_at, ${SLOT_AT_OR_AFTER('m.id', 'm.interval_ms', EPOCH_MS('r.not_before'))}) END
         FROM r WHERE m.id = r.monitor_id AND ${heldBy(MONITORS, { fence: 'r.fence' }, 'm')} RETURNING m.id)
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
        col((p) => p.notBefore ?? null),
      ],
    );
    return rows.filter((r) => Boolean(r.fenced_out)).length;
  }

  /**
   * For channel_monitor's health: enabled monitors with a free lease (none, expired, holder dead) a whole interval of their own past due
   * (a probe missed, not a busy second), and since when the oldest has waited. Read-only.
   */
  async missedIntervals(): Promise<{ missed: number; oldestDueAt: Date | null }> {
    const { rows } = await this.db.query(
      `SELECT count(*) AS n, min(next_due_at) AS oldest FROM monitors
        WHERE enabled AND next_due_at <= now() - make_interval(secs => interval_ms::double precision / 1000) AND ${leaseFree(MONITORS, 'now()')}`,
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

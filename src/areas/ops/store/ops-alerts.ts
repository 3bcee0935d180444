import type { Db } from '../../../store/db.js';
import { iso, num, toDate } from '../../../store/db.js';
import { FencedWriteRefused } from '../../../errors/app-error.js';
import type { MonitorSelector } from '../../probes/index.js';
import { enqueueDeliveries, type DeliveryIntent } from '../../notifications/index.js';

export interface AlertRule {
  id: number;
  name: string;
  metric: string;
  operator: '>' | '>=' | '<' | '<=' | '==' | '!=';
  threshold: number;
  window_seconds: number;
  sustained: number;
  severity: 'info' | 'warning' | 'critical';
  cooldown_seconds: number;
  labels: Record<string, string>;
  /** Which monitors a rule over a `monitor_*` metric watches; null for every other metric. */
  selector: MonitorSelector | null;
  enabled: boolean;
  notify: boolean;
  created_at: string;
  updated_at: string;
}
export type RuleInput = Omit<AlertRule, 'id' | 'created_at' | 'updated_at' | 'selector'> & { selector?: MonitorSelector | null };

export interface AlertEvent {
  id: number;
  rule_id: number;
  rule_name: string;
  metric: string;
  severity: string;
  state: 'firing' | 'resolved';
  value: number | null;
  threshold: number;
  /** `''` for a rule over the ops series; `monitor:<id>` for one monitor of a monitor rule. */
  series: string;
  labels: Record<string, string>;
  silenced: boolean;
  fired_at: string;
  resolved_at: string | null;
}

export interface StoredState {
  rule_id: number;
  series: string;
  streak: number;
  last_bucket: Date | null;
  event_id: number | null;
  resolved_at: Date | null;
}

/** An outbox intent written in the same transaction as the transition it announces (notifications' enqueue). */
export type Intent = DeliveryIntent;

const RULE_COLS = ['name', 'metric', 'operator', 'threshold', 'window_seconds', 'sustained', 'severity', 'cooldown_seconds', 'labels', 'selector', 'enabled', 'notify'] as const;
const JSON_COLS = new Set<string>(['labels', 'selector']);

function toRule(r: Record<string, unknown>): AlertRule {
  return {
    id: num(r.id),
    name: String(r.name),
    metric: String(r.metric),
    operator: r.operator as AlertRule['operator'],
    threshold: num(r.threshold),
    window_seconds: num(r.window_seconds),
    sustained: num(r.sustained),
    severity: r.severity as AlertRule['severity'],
    cooldown_seconds: num(r.cooldown_seconds),
    labels: (r.labels as Record<string, string>) ?? {},
    selector: (r.selector as MonitorSelector | null) ?? null,
    enabled: Boolean(r.enabled),
    notify: Boolean(r.notify),
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  };
}

function toEvent(r: Record<string, unknown>): AlertEvent {
  return {
    id: num(r.id),
    rule_id: num(r.rule_id),
    rule_name: String(r.rule_name),
    metric: String(r.metric),
    severity: String(r.severity),
    state: r.state as AlertEvent['state'],
    value: r.value === null ? null : num(r.value),
    threshold: num(r.threshold),
    series: String(r.series ?? ''),
    labels: r.labels as Record<string, string>,
    silenced: Boolean(r.silenced),
    fired_at: iso(r.fired_at)!,
    resolved_at: iso(r.resolved_at),
  };
}

const asParam = (k: (typeof RULE_COLS)[number], v: unknown) => (JSON_COLS.has(k) ? (v === null || v === undefined ? null : JSON.stringify(v)) : v);

/** Alert rules, their fenced evaluation state, and events. */
export class OpsAlerts {
  constructor(private readonly db: Db) {}

  async createRule(r: RuleInput): Promise<AlertRule> {
    const { rows } = await this.db.query(
      `INSERT INTO ops_alert_rules (${RULE_COLS.join(', ')}) VALUES (${RULE_COLS.map((c, i) => `$${i + 1}${JSON_COLS.has(c) ? '::jsonb' : ''}`).join(', ')}) RETURNING *`,
      RULE_COLS.map((c) => asParam(c, r[c])),
    );
    return toRule(rows[0]!);
  }

  async updateRule(id: number, patch: Partial<RuleInput>): Promise<AlertRule | null> {
    const keys = RULE_COLS.filter((c) => patch[c] !== undefined);
    if (!keys.length) return this.rule(id);
    const { rows } = await this.db.query(
      `UPDATE ops_alert_rules SET ${keys.map((c, i) => `${c} = $${i + 2}${JSON_COLS.has(c) ? '::jsonb' : ''}`).join(', ')}, updated_at = clock_timestamp() WHERE id = $1 RETURNING *`,
      [id, ...keys.map((c) => asParam(c, patch[c]))],
    );
    return rows[0] ? toRule(rows[0]) : null;
  }

  async deleteRule(id: number): Promise<boolean> {
    return (await this.db.query(`DELETE FROM ops_alert_rules WHERE id = $1`, [id])).rowCount === 1;
  }

  async rule(id: number): Promise<AlertRule | null> {
    const { rows } = await this.db.query(`SELECT * FROM ops_alert_rules WHERE id = $1`, [id]);
    return rows[0] ? toRule(rows[0]) : null;
  }

  async rules(onlyEnabled = false): Promise<AlertRule[]> {
    const { rows } = await this.db.query(`SELECT * FROM ops_alert_rules WHERE ($1::boolean IS FALSE OR enabled) ORDER BY id`, [onlyEnabled]);
    return rows.map(toRule);
  }

  /** Every stored state, one per rule and series. */
  async states(): Promise<StoredState[]> {
    const { rows } = await this.db.query<Record<string, unknown>>(`SELECT rule_id, series, streak, last_bucket, event_id, resolved_at FROM ops_alert_state`);
    return rows.map((r) => ({
      rule_id: num(r.rule_id),
      series: String(r.series),
      streak: num(r.streak),
      last_bucket: toDate(r.last_bucket),
      event_id: r.event_id === null ? null : num(r.event_id),
      resolved_at: toDate(r.resolved_at),
    }));
  }

  /**
   * Stores one rule's new state, and on a transition its event and notification intents, in one
   * transaction fenced by the round's token: the job's token row is read FOR SHARE, so a newer
   * round cannot be granted while this commits, and a round whose token is stale writes nothing.
   */
  async apply(
    a: { job: string; token: number; ruleId: number; series?: string; streak: number; lastBucket: Date | null; resolvedAt: Date | null },
    transition: { kind: 'fire'; rule: AlertRule; value: number; bucket: Date; silenced: boolean; labels?: Record<string, string> } | { kind: 'resolve'; eventId: number; value: number | null } | null,
    intents: (eventId: number) => Intent[],
  ): Promise<number | null> {
    return this.db.tx(async (q) => {
      const fence = await q.query<{ fencing_token: unknown }>(`SELECT fencing_token FROM job_state WHERE job_name = $1 FOR SHARE`, [a.job]);
      const series = a.series ?? '';
      const what = `alert_state:${a.ruleId}${series ? `:${series}` : ''}`;
      if (!fence.rows[0] || num(fence.rows[0].fencing_token) > a.token) throw new FencedWriteRefused(a.job, what, a.token);
      let eventId: number | null = null;
      if (transition?.kind === 'fire') {
        const r = transition.rule;
        const { rows } = await q.query<{ id: unknown }>(
          `INSERT INTO ops_alert_events (rule_id, rule_name, metric, severity, state, value, threshold, labels, silenced, fired_bucket, fencing_token, series)
           VALUES ($1, $2, $3, $4, 'firing', $5, $6, $7::jsonb, $8, $9, $10, $11) RETURNING id`,
          [r.id, r.name, r.metric, r.severity, transition.value, r.threshold, JSON.stringify(transition.labels ?? r.labels), transition.silenced, transition.bucket, a.token, series],
        );
        eventId = num(rows[0]!.id);
      } else if (transition?.kind === 'resolve') {
        await q.query(`UPDATE ops_alert_events SET state = 'resolved', resolved_at = clock_timestamp() WHERE id = $1 AND state = 'firing'`, [transition.eventId]);
        eventId = transition.eventId;
      }
      const stateEvent = transition?.kind === 'fire' ? eventId : transition?.kind === 'resolve' ? null : undefined;
      const { rowCount } = await q.query(
        `INSERT INTO ops_alert_state (rule_id, streak, last_bucket, event_id, resolved_at, fencing_token, series) VALUES ($1, $2, $3, $4, $5, $6, $8)
         ON CONFLICT (rule_id, series) DO UPDATE SET streak = EXCLUDED.streak, last_bucket = EXCLUDED.last_bucket,
           event_id = CASE WHEN $7::boolean THEN EXCLUDED.event_id ELSE ops_alert_state.event_id END,
           resolved_at = EXCLUDED.resolved_at, fencing_token = EXCLUDED.fencing_token, updated_at = clock_timestamp()
         WHERE ops_alert_state.fencing_token <= EXCLUDED.fencing_token`,
        [a.ruleId, a.streak, a.lastBucket, stateEvent ?? null, a.resolvedAt, a.token, stateEvent !== undefined, series],
      );
      if (rowCount !== 1) throw new FencedWriteRefused(a.job, what, a.token);
      if (eventId !== null) await enqueueDeliveries(q, intents(eventId));
      return eventId;
    });
  }

  /**
   * Streak moves without a transition, for many rules in one statement (a round over 1,000
   * rules writes once, not 1,000 times), under the same fence as `apply`.
   */
  async applyStreaks(job: string, token: number, rows: Array<{ ruleId: number; series?: string; streak: number; lastBucket: Date | null }>): Promise<void> {
    if (!rows.length) return;
    await this.db.tx(async (q) => {
      const fence = await q.query<{ fencing_token: unknown }>(`SELECT fencing_token FROM job_state WHERE job_name = $1 FOR SHARE`, [job]);
      if (!fence.rows[0] || num(fence.rows[0].fencing_token) > token) throw new FencedWriteRefused(job, 'alert_state', token);
      const { rowCount } = await q.query(
        `INSERT INTO ops_alert_state (rule_id, series, streak, last_bucket, fencing_token)
         SELECT x.rule_id, x.series, x.streak, x.last_bucket, $2 FROM jsonb_to_recordset($1::jsonb) AS x(rule_id bigint, series text, streak integer, last_bucket timestamptz)
         ON CONFLICT (rule_id, series) DO UPDATE SET streak = EXCLUDED.streak, last_bucket = EXCLUDED.last_bucket, fencing_token = EXCLUDED.fencing_token, updated_at = clock_timestamp()
         WHERE ops_alert_state.fencing_token <= EXCLUDED.fencing_token`,
        [JSON.stringify(rows.map((r) => ({ rule_id: r.ruleId, series: r.series ?? '', streak: r.streak, last_bucket: r.lastBucket?.toISOString() ?? null }))), token],
      );
      if (rowCount !== rows.length) throw new FencedWriteRefused(job, 'alert_state', token);
    });
  }

  async events(f: { state?: 'firing' | 'resolved'; limit: number }): Promise<AlertEvent[]> {
    const { rows } = await this.db.query(`SELECT * FROM ops_alert_events WHERE ($1::text IS NULL OR state = $1) ORDER BY id DESC LIMIT $2`, [f.state ?? null, f.limit]);
    return rows.map(toEvent);
  }

  async event(id: number): Promise<AlertEvent | null> {
    const { rows } = await this.db.query(`SELECT * FROM ops_alert_events WHERE id = $1`, [id]);
    return rows[0] ? toEvent(rows[0]) : null;
  }
}

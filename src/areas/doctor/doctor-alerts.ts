import type { Config } from '../../config/load.js';
import type { Logger } from '../../telemetry/logger.js';
import type { AlertRule } from '../ops/index.js';
import type { DoctorReport } from './index.js';
import type { Ops } from '../ops/index.js';
import { alertIntents } from '../ops/index.js';
import { silencedBy } from '../ops/index.js';

/** The alert rule the doctor's events belong to; its metric is judged by the doctor, never by ops_alert_evaluator. */
export const DOCTOR_RULE = 'doctor';
export const DOCTOR_METRIC = 'doctor_check';

async function doctorRule(ops: Ops): Promise<AlertRule> {
  const find = async () => (await ops.alerts.rules()).find((r) => r.name === DOCTOR_RULE);
  const existing = await find();
  if (existing) return existing;
  try {
    return await ops.alerts.createRule({
      name: DOCTOR_RULE,
      metric: DOCTOR_METRIC,
      operator: '>=',
      threshold: 1,
      window_seconds: 3600,
      sustained: 1,
      severity: 'critical',
      cooldown_seconds: 0,
      labels: { source: 'doctor' },
      enabled: true,
      notify: true,
    });
  } catch (err) {
    const again = await find(); // another round created it first (name is unique)
    if (again) return again;
    throw err;
  }
}

/**
 * A check that turns `fail` fires one event of rule `doctor` (series `check:<name>`, labels
 * `check`, `group`) through the ops alert path: fenced by the doctor round's token, its
 * notification intents in the same transaction, silences honoured; the event resolves when the
 * check is no longer `fail`. Disabling the rule resolves its events and fires no more.
 */
export async function raiseDoctorAlerts(i: {
  ops: Ops;
  config: Config;
  channels: Iterable<string>;
  job: string;
  token: number;
  now: number;
  report: DoctorReport;
  log: Logger;
}): Promise<{ fired: number; resolved: number }> {
  const { ops, config } = i;
  const channels = [...i.channels];
  const rule = await doctorRule(ops);
  const states = new Map((await ops.alerts.states()).filter((s) => s.rule_id === rule.id).map((s) => [s.series, s]));
  const silences = await ops.silences.list();
  const out = { fired: 0, resolved: 0 };
  const base = (series: string, firing: boolean) => ({
    job: i.job,
    token: i.token,
    ruleId: rule.id,
    series,
    streak: firing ? 1 : 0,
    lastBucket: new Date(i.now),
    resolvedAt: firing ? null : new Date(i.now),
  });
  const seen = new Set<string>();
  for (const c of i.report.checks) {
    const series = `check:${c.name}`;
    seen.add(series);
    const st = states.get(series);
    const firing = st?.event_id != null;
    const labels = { ...rule.labels, check: c.name, group: c.group };
    const target = { labels, title: `check ${c.name}` };
    if (c.status === 'fail' && !firing && rule.enabled) {
      const spec = { id: rule.id, name: rule.name, metric: rule.metric, operator: rule.operator, threshold: rule.threshold, sustained: 1, cooldownMs: 0, severity: rule.severity, labels };
      const silenced = silencedBy(spec, silences, i.now) !== null;
      await ops.alerts.apply(base(series, true), { kind: 'fire', rule, value: 1, bucket: new Date(i.now), silenced, labels }, (id) =>
        alertIntents(config, channels, rule, id, 'firing', 1, silenced, target),
      );
      i.log.warn({ check: c.name, measured: c.measured, silenced }, 'doctor check failing: alert fired');
      out.fired++;
    } else if (firing && (c.status !== 'fail' || !rule.enabled)) {
      await resolve(series, st!.event_id!, target);
      i.log.info({ check: c.name, status: c.status }, 'doctor check no longer failing: alert resolved');
    }
  }
  // A check that no longer runs (mode changed, check removed) resolves too.
  for (const [series, st] of states) if (!seen.has(series) && st.event_id != null) await resolve(series, st.event_id, null);
  return out;

  async function resolve(series: string, eventId: number, target: { labels: Record<string, string>; title: string } | null) {
    const event = await ops.alerts.event(eventId);
    const t = target ?? (event ? { labels: event.labels, title: series.replace(/^check:/, 'check ') } : undefined);
    await ops.alerts.apply(base(series, false), { kind: 'resolve', eventId, value: 0 }, (id) => alertIntents(config, channels, rule, id, 'resolved', 0, event?.silenced ?? false, t));
    out.resolved++;
  }
}

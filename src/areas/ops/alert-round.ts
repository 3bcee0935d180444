import type { Config } from '../../config/load.js';
import type { Logger } from '../../telemetry/logger.js';
import type { AlertRule, StoredState } from './store/ops-alerts.js';
import type { Ops } from './ops-services.js';
import { fold } from './catalogue.js';
import { silencedBy, step, type AlertState, type RuleSpec } from './alert-logic.js';
import { alertIntents } from './alert-notice.js';
import { isMonitorMetric, monitorSeries, type SeriesObservation } from './monitor-series.js';

export interface AlertRoundInput {
  ops: Ops;
  config: Config;
  channels: Iterable<string>;
  job: string;
  token: number;
  now: number;
  signal: AbortSignal;
  log: Logger;
}

export interface AlertRoundResult {
  rules: number;
  series: number;
  fired: number;
  resolved: number;
  firing: number;
  bucket: Date | null;
}

type Streak = { ruleId: number; series: string; streak: number; lastBucket: Date | null };

/**
 * One evaluation of every enabled rule. A rule over the ops series is one series (key `''`), folded
 * over the window ending at the newest stored bucket; that bucket is unknown when older than three
 * buckets plus one interval (the collector stopped). A rule over a `monitor_*` metric is one
 * series per monitor it selects (monitor-series.ts), each with its own streak and event. Series
 * whose streak did not move write nothing; streak moves are written together in one fenced
 * statement, transitions each in their own fenced transaction (`OpsAlerts.apply`).
 */
export async function evaluateAlerts(i: AlertRoundInput): Promise<AlertRoundResult> {
  const { ops, config } = i;
  const bucketMs = config.ops.bucket;
  const channels = [...i.channels];
  // The doctor's rule (metric doctor_check) is judged by the doctor job (jobs/doctor/doctor-alerts.ts), not over the series.
  const allRules = (await ops.alerts.rules()).filter((r) => r.metric !== 'doctor_check');
  const rules = allRules.filter((r) => r.enabled);
  const stored = byRule(await ops.alerts.states());
  const silences = await ops.silences.list();
  const latest = await ops.series.latest();
  const fresh = latest && latest.bucket.getTime() + bucketMs * 3 + config.ops.alert_interval >= i.now ? latest.bucket : null;
  const seriesRules = rules.filter((r) => !isMonitorMetric(r.metric));
  const maxWindow = Math.max(0, ...seriesRules.map((r) => r.window_seconds * 1000));
  const buckets = fresh && seriesRules.length ? (await ops.series.window(fresh, maxWindow)).map((p) => ({ ...p, t: Date.parse(p.bucket) })) : [];
  const out: AlertRoundResult = { rules: rules.length, series: 0, fired: 0, resolved: 0, firing: 0, bucket: fresh };
  const streaks: Streak[] = [];

  const opsSeries = (rule: AlertRule): SeriesObservation => {
    const inWindow = fresh ? buckets.filter((b) => b.t > fresh.getTime() - rule.window_seconds * 1000) : [];
    return { key: '', labels: rule.labels, title: null, bucket: fresh?.getTime() ?? null, value: fresh ? fold(rule.metric, inWindow, bucketMs / 1000) : null };
  };

  const evaluate = async (rule: AlertRule, o: SeriesObservation, stored: StoredState | undefined) => {
    const s: AlertState = { streak: stored?.streak ?? 0, lastBucket: stored?.last_bucket?.getTime() ?? null, firing: stored?.event_id != null, resolvedAt: stored?.resolved_at?.getTime() ?? null };
    // Silences match the event's labels: for a monitor series they name the monitor.
    const spec: RuleSpec = {
      id: rule.id,
      name: rule.name,
      metric: rule.metric,
      operator: rule.operator,
      threshold: rule.threshold,
      sustained: rule.sustained,
      cooldownMs: rule.cooldown_seconds * 1000,
      severity: rule.severity,
      labels: o.labels,
    };
    const { state, transition } = step(spec, s, { bucket: o.bucket, value: o.value }, i.now);
    if (state.firing) out.firing++;
    // Nothing to store when the streak did not move: a series that stays at 0 writes nothing (its
    // last_bucket only guards increments, and a breaching bucket always writes).
    if (transition === 'none' && state.streak === s.streak) return;
    const base = {
      job: i.job,
      token: i.token,
      ruleId: rule.id,
      series: o.key,
      streak: state.streak,
      lastBucket: state.lastBucket === null ? null : new Date(state.lastBucket),
      resolvedAt: state.resolvedAt === null ? null : new Date(state.resolvedAt),
    };
    const logged = { rule: rule.name, metric: rule.metric, value: o.value, ...(o.title ? { series: o.title } : {}) };
    if (transition === 'fire') {
      const silence = silencedBy(spec, silences, i.now);
      await ops.alerts.apply(base, { kind: 'fire', rule, value: o.value!, bucket: new Date(o.bucket!), silenced: silence !== null, labels: o.labels }, (id) =>
        alertIntents(config, channels, rule, id, 'firing', o.value, silence !== null, o),
      );
      i.log.warn({ ...logged, silenced: silence?.id ?? null }, 'alert firing');
      out.fired++;
    } else if (transition === 'resolve') {
      await resolve(rule, base, stored!.event_id!, o.value, o);
      i.log.info(logged, 'alert resolved');
    } else {
      streaks.push({ ruleId: rule.id, series: o.key, streak: state.streak, lastBucket: base.lastBucket });
    }
  };

  const resolve = async (rule: AlertRule, base: Parameters<Ops['alerts']['apply']>[0], eventId: number, value: number | null, o: Pick<SeriesObservation, 'labels' | 'title'> | null) => {
    const event = await ops.alerts.event(eventId);
    const target = o ?? (event ? { labels: event.labels, title: event.labels.monitor ? `monitor ${event.labels.monitor}` : null } : undefined);
    await ops.alerts.apply(base, { kind: 'resolve', eventId, value }, (id) => alertIntents(config, channels, rule, id, 'resolved', value, event?.silenced ?? false, target));
    out.resolved++;
  };

  // Series a rule no longer observes (its monitor was deleted, disabled or relabelled, the rule's
  // metric or selector changed, or the rule was disabled): a firing event resolves (value unknown),
  // a streak resets, so a series that comes back starts from nothing.
  const retire = async (rule: AlertRule, states: Map<string, StoredState>, why: string) => {
    for (const [key, st] of states) {
      const base = { job: i.job, token: i.token, ruleId: rule.id, series: key, streak: 0, lastBucket: st.last_bucket };
      if (st.event_id !== null) {
        await resolve(rule, { ...base, resolvedAt: new Date(i.now) }, st.event_id, null, null);
        i.log.info({ rule: rule.name, metric: rule.metric, series: key }, `alert resolved: ${why}`);
      } else if (st.streak > 0) streaks.push(base);
    }
  };

  for (const rule of rules) {
    if (i.signal.aborted) throw i.signal.reason;
    const observed = isMonitorMetric(rule.metric) ? await monitorSeries(ops.monitorWindows, rule, bucketMs) : [opsSeries(rule)];
    const states = stored.get(rule.id) ?? new Map<string, StoredState>();
    for (const o of observed) {
      out.series++;
      await evaluate(rule, o, states.get(o.key));
      states.delete(o.key);
    }
    await retire(rule, states, 'the series is no longer selected');
  }
  // A disabled rule judges nothing: its firing events resolve (value unknown) and its streaks reset,
  // so re-enabling it starts from nothing instead of leaving an event firing forever.
  for (const rule of allRules) if (!rule.enabled && stored.has(rule.id)) await retire(rule, stored.get(rule.id)!, 'the rule is disabled');
  await ops.alerts.applyStreaks(i.job, i.token, streaks);
  return out;
}

function byRule(states: StoredState[]): Map<number, Map<string, StoredState>> {
  const m = new Map<number, Map<string, StoredState>>();
  for (const s of states) {
    let r = m.get(s.rule_id);
    if (!r) m.set(s.rule_id, (r = new Map()));
    r.set(s.series, s);
  }
  return m;
}

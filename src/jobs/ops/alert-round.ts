import type { Config } from '../../config/load.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Ops } from './ops-services.js';
import { fold } from './catalogue.js';
import { silencedBy, step, type AlertState, type RuleSpec } from './alert-logic.js';
import { alertIntents } from './alert-notice.js';

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

/**
 * One evaluation of every enabled rule over the window ending at the newest stored bucket. The
 * newest bucket is unknown when older than three buckets plus one interval (the collector
 * stopped). Rules whose streak did not move write nothing; streak moves are written together in
 * one fenced statement, transitions each in their own fenced transaction (`OpsAlerts.apply`).
 */
export async function evaluateAlerts(i: AlertRoundInput): Promise<{ rules: number; fired: number; resolved: number; firing: number; bucket: Date | null }> {
  const { ops, config, now } = i;
  const bucketMs = config.ops.bucket;
  const channels = [...i.channels];
  const rules = await ops.alerts.rules(true);
  const states = await ops.alerts.states();
  const silences = await ops.silences.list();
  const latest = await ops.series.latest();
  const fresh = latest && latest.bucket.getTime() + bucketMs * 3 + config.ops.alert_interval >= now ? latest.bucket : null;
  const maxWindow = Math.max(0, ...rules.map((r) => r.window_seconds * 1000));
  const buckets = fresh ? (await ops.series.window(fresh, maxWindow)).map((p) => ({ ...p, t: Date.parse(p.bucket) })) : [];
  const out = { rules: rules.length, fired: 0, resolved: 0, firing: 0, bucket: fresh };
  const streaks: Array<{ ruleId: number; streak: number; lastBucket: Date | null }> = [];
  for (const rule of rules) {
    if (i.signal.aborted) throw i.signal.reason;
    const stored = states.get(rule.id);
    const s: AlertState = { streak: stored?.streak ?? 0, lastBucket: stored?.last_bucket?.getTime() ?? null, firing: stored?.event_id != null, resolvedAt: stored?.resolved_at?.getTime() ?? null };
    const spec: RuleSpec = {
      id: rule.id,
      name: rule.name,
      metric: rule.metric,
      operator: rule.operator,
      threshold: rule.threshold,
      sustained: rule.sustained,
      cooldownMs: rule.cooldown_seconds * 1000,
      severity: rule.severity,
      labels: rule.labels,
    };
    const inWindow = fresh ? buckets.filter((b) => b.t > fresh.getTime() - rule.window_seconds * 1000) : [];
    const value = fresh ? fold(rule.metric, inWindow, bucketMs / 1000) : null;
    const { state, transition } = step(spec, s, { bucket: fresh?.getTime() ?? null, value }, now);
    if (state.firing) out.firing++;
    // Nothing to store when the streak did not move: a rule that stays at 0 writes nothing (its
    // last_bucket only guards increments, and a breaching bucket always writes).
    if (transition === 'none' && state.streak === s.streak) continue;
    const base = {
      job: i.job,
      token: i.token,
      ruleId: rule.id,
      streak: state.streak,
      lastBucket: state.lastBucket === null ? null : new Date(state.lastBucket),
      resolvedAt: state.resolvedAt === null ? null : new Date(state.resolvedAt),
    };
    if (transition === 'fire') {
      const silence = silencedBy(spec, silences, now);
      await ops.alerts.apply(base, { kind: 'fire', rule, value: value!, bucket: fresh!, silenced: silence !== null }, (id) =>
        alertIntents(config, channels, rule, id, 'firing', value, silence !== null),
      );
      i.log.warn({ rule: rule.name, metric: rule.metric, value, silenced: silence?.id ?? null }, 'alert firing');
      out.fired++;
    } else if (transition === 'resolve') {
      const eventId = stored!.event_id!;
      const event = await ops.alerts.event(eventId);
      await ops.alerts.apply(base, { kind: 'resolve', eventId, value }, (id) => alertIntents(config, channels, rule, id, 'resolved', value, event?.silenced ?? false));
      i.log.info({ rule: rule.name, metric: rule.metric, value }, 'alert resolved');
      out.resolved++;
    } else {
      streaks.push({ ruleId: rule.id, streak: state.streak, lastBucket: base.lastBucket });
    }
  }
  await ops.alerts.applyStreaks(i.job, i.token, streaks);
  return out;
}

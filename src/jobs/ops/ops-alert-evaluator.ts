import { defineJob } from '../define-job.js';
import { fold } from './catalogue.js';
import { silencedBy, step, type AlertState, type RuleSpec } from './alert-logic.js';
import { alertIntents } from './alert-notice.js';
import { OPS_TEMPLATES } from './ops-services.js';

/**
 * ops_alert_evaluator: folds each enabled rule's window over the stored buckets and advances its
 * state machine (jobs/ops/alert-logic.ts). State, events and notification intents are written in
 * one transaction fenced by the round's token (store/ops-alerts.ts `apply`), so the streak
 * survives the evaluator's replica dying mid-streak and a stale round cannot write. The newest
 * bucket is unknown when older than two buckets plus one interval (the collector stopped).
 */
export const opsAlertEvaluatorJob = defineJob({
  name: 'ops_alert_evaluator',
  description: 'Evaluates ops alert rules over the collected series; fires and resolves alert events exactly once',
  scope: 'cluster',
  defaults: (config) => ({ enabled: true, every: `${config.ops.alert_interval}ms`, timeout: `${Math.max(10_000, config.ops.alert_interval)}ms` }),
  needs: ['ops', 'notifier', 'metrics'],
  async run(ctx, { ops, notifier, metrics }, _o, config) {
    const t0 = ctx.clock.now();
    const now = ctx.clock.now();
    const bucketMs = config.ops.bucket;
    const rules = await ops.alerts.rules(true);
    const states = await ops.alerts.states();
    const silences = await ops.alerts.silences();
    const latest = await ops.series.latest();
    const fresh = latest && latest.bucket.getTime() + bucketMs * 3 + config.ops.alert_interval >= now ? latest.bucket : null;
    const maxWindow = Math.max(0, ...rules.map((r) => r.window_seconds * 1000));
    const buckets = fresh ? (await ops.series.window(fresh, maxWindow)).map((p) => ({ ...p, t: Date.parse(p.bucket) })) : [];
    let fired = 0;
    let resolved = 0;
    let firing = 0;
    for (const rule of rules) {
      if (ctx.signal.aborted) throw ctx.signal.reason;
      const stored = states.get(rule.id);
      const s: AlertState = { streak: stored?.streak ?? 0, lastBucket: stored?.last_bucket?.getTime() ?? null, firing: stored?.event_id != null, resolvedAt: stored?.resolved_at?.getTime() ?? null };
      const spec: RuleSpec = { id: rule.id, name: rule.name, metric: rule.metric, operator: rule.operator, threshold: rule.threshold, sustained: rule.sustained, cooldownMs: rule.cooldown_seconds * 1000, severity: rule.severity, labels: rule.labels };
      const inWindow = fresh ? buckets.filter((b) => b.t > fresh.getTime() - rule.window_seconds * 1000) : [];
      const value = fresh ? fold(rule.metric, inWindow, bucketMs / 1000) : null;
      const { state, transition } = step(spec, s, { bucket: fresh?.getTime() ?? null, value }, now);
      if (state.firing) firing++;
      if (transition === 'none' && state.streak === s.streak && state.lastBucket === s.lastBucket) continue;
      const base = { job: ctx.job, token: ctx.fencingToken, ruleId: rule.id, streak: state.streak, lastBucket: state.lastBucket === null ? null : new Date(state.lastBucket), resolvedAt: state.resolvedAt === null ? null : new Date(state.resolvedAt) };
      if (transition === 'fire') {
        const silence = silencedBy(spec, silences, now);
        await ops.alerts.apply(base, { kind: 'fire', rule, value: value!, bucket: fresh!, silenced: silence !== null }, (id) => alertIntents(config, notifier.channels.keys(), rule, id, 'firing', value, silence !== null));
        ctx.log.warn({ rule: rule.name, metric: rule.metric, value, silenced: silence?.id ?? null }, 'alert firing');
        fired++;
      } else if (transition === 'resolve') {
        const eventId = stored!.event_id!;
        const event = await ops.alerts.event(eventId);
        await ops.alerts.apply(base, { kind: 'resolve', eventId, value }, (id) => alertIntents(config, notifier.channels.keys(), rule, id, 'resolved', value, event?.silenced ?? false));
        ctx.log.info({ rule: rule.name, metric: rule.metric, value }, 'alert resolved');
        resolved++;
      } else {
        await ops.alerts.apply(base, null, () => []);
      }
    }
    metrics.ops.alertsFiring.set(firing);
    if (fired) metrics.ops.alertTransitions.inc({ transition: 'fire' }, fired);
    if (resolved) metrics.ops.alertTransitions.inc({ transition: 'resolve' }, resolved);
    const d = await notifier.deliverDue(ctx.instanceId, async () => null, ctx.signal, OPS_TEMPLATES);
    metrics.ops.evaluateSeconds.observe((ctx.clock.now() - t0) / 1000);
    return {
      items: fired + resolved + d.sent,
      note: `${rules.length} rules over bucket ${fresh?.toISOString() ?? 'none (unknown)'}: ${fired} fired, ${resolved} resolved, ${firing} firing; ${d.sent} notifications sent, ${d.failed} failed, ${d.deferred} deferred`,
    };
  },
});

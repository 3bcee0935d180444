import { jobsFor } from '../../modules/define-job.js';
import type { OpsServices } from './wiring.js';
import type { NotificationsFace } from '../notifications/index.js';
import { evaluateAlerts } from './alert-round.js';
import { OPS_TEMPLATES } from './ops-services.js';
import { OpsMetrics } from './metrics.js';

const defineJob = jobsFor<OpsServices & NotificationsFace>();

/**
 * ops_alert_evaluator: folds each enabled rule's window over the stored buckets and advances its
 * state machine (jobs/ops/alert-logic.ts, one round in alert-round.ts). State, events and
 * notification intents are written in one transaction fenced by the round's token
 * (store/ops-alerts.ts `apply`), so the streak survives the evaluator's replica dying mid-streak
 * and a stale round cannot write. Then the due ops notifications are sent from the outbox.
 * Its start on a replica installs the default rules never installed before (default-rules.ts).
 */
export const opsAlertEvaluatorJob = defineJob({
  name: 'ops_alert_evaluator',
  description: 'Evaluates ops alert rules over the collected series; fires and resolves alert events exactly once',
  scope: 'cluster',
  defaults: (config) => ({ enabled: true, every: `${config.ops.alert_interval}ms`, timeout: `${Math.max(10_000, config.ops.alert_interval)}ms` }),
  needs: ['ops', 'notifier', 'metrics'],
  async onStart({ ops }, log) {
    await ops.installDefaults?.(log);
  },
  async run(ctx, { ops, notifier, metrics }, _o, config) {
    const t0 = ctx.clock.now();
    const r = await evaluateAlerts({ ops, config, channels: notifier.channels.keys(), job: ctx.job, token: ctx.fencingToken, now: ctx.clock.now(), signal: ctx.signal, log: ctx.log });
    const m = metrics.group(OpsMetrics);
    m.alertsFiring.set(r.firing);
    if (r.fired) m.alertTransitions.inc({ transition: 'fire' }, r.fired);
    if (r.resolved) m.alertTransitions.inc({ transition: 'resolve' }, r.resolved);
    m.evaluateSeconds.observe((ctx.clock.now() - t0) / 1000);
    const d = await notifier.deliverDue(ctx.instanceId, async () => null, ctx.signal, OPS_TEMPLATES);
    return {
      items: r.fired + r.resolved + d.sent,
      note: `${r.rules} rules (${r.series} series) over bucket ${r.bucket?.toISOString() ?? 'none (unknown)'}: ${r.fired} fired, ${r.resolved} resolved, ${r.firing} firing; ${d.sent} notifications sent, ${d.failed} failed, ${d.deferred} deferred, ${d.rate_limited} rate-limited`,
    };
  },
});

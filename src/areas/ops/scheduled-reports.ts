import type { Intent } from './store/ops-alerts.js';
import { jobsFor } from '../../modules/define-job.js';
import type { OpsServices } from './wiring.js';
import type { NotificationsFace } from '../notifications/index.js';
import { OPS_TEMPLATES } from './ops-services.js';
import { occurrencesBetween } from './report-schedule.js';
import { renderReport } from './report-render.js';
import { OpsMetrics } from './metrics.js';

const defineJob = jobsFor<OpsServices & NotificationsFace>();

/**
 * scheduled_reports: for each enabled report, the newest cron occurrence (in its time zone) not
 * yet recorded is rendered and queued in the outbox in one transaction with its occurrence row
 * (`ops_report_runs`, primary key report + occurrence): each occurrence happens exactly once,
 * whichever replica runs and however often it dies. Older unrecorded occurrences (downtime) are
 * recorded as coalesced, not sent. An empty report is recorded as skipped_empty. A broken channel
 * is the outbox's business: the delivery backs off; the occurrence is never queued again.
 */
export const scheduledReportsJob = defineJob({
  name: 'scheduled_reports',
  description: 'Queues each scheduled report occurrence once (cron in a time zone) and sends due report mail',
  scope: 'cluster',
  defaults: { enabled: true, every: '1m', timeout: '5m' },
  needs: ['ops', 'notifier', 'metrics'],
  async run(ctx, { ops, notifier, metrics }, _o, config) {
    const now = new Date(ctx.clock.now());
    const reports = await ops.reports.list(true);
    const last = await ops.reports.lastOccurrences();
    let queued = 0;
    let skipped = 0;
    for (const r of reports) {
      if (ctx.signal.aborted) throw ctx.signal.reason;
      const since = last.get(r.id) ?? new Date(Math.max(Date.parse(r.created_at), Date.parse(r.updated_at)));
      const due = occurrencesBetween(r.cron, r.timezone, since, now);
      const occurrence = due.pop();
      if (!occurrence) continue;
      const out = await renderReport(ops, r, occurrence, config.ops.bucket);
      const intents: Intent[] = [];
      if (!out.empty) {
        for (const to of r.recipients) {
          const channel = to === 'webhook' ? 'webhook' : 'email';
          if (!notifier.channels.has(channel)) continue;
          intents.push({
            dedupKey: `ops-report:${r.id}:${occurrence.toISOString()}:${channel}:${to}`,
            channel,
            recipient: to,
            template: 'ops_report',
            params: { subject: out.subject, text: out.text, html: out.html, report: r.name, occurrence: occurrence.toISOString() },
          });
        }
      }
      const recorded = await ops.reports.record(r.id, occurrence, out.empty ? 'skipped_empty' : 'queued', out.note, intents, due);
      if (!recorded) continue;
      if (out.empty) skipped++;
      else queued++;
      metrics.group(OpsMetrics).reportsQueued.inc({ outcome: out.empty ? 'skipped_empty' : 'queued' });
      ctx.log.info({ report: r.name, occurrence: occurrence.toISOString(), empty: out.empty, coalesced: due.length, recipients: intents.length }, 'report occurrence recorded');
    }
    const d = await notifier.deliverDue(ctx.instanceId, async () => null, ctx.signal, OPS_TEMPLATES);
    return { items: queued + skipped + d.sent, note: `${queued} queued, ${skipped} empty; ${d.sent} sent, ${d.failed} failed, ${d.deferred} deferred, ${d.rate_limited} rate-limited` };
  },
});

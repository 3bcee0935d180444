import { jobsFor } from '../../modules/define-job.js';
import type { DoctorServices } from './wiring.js';
import type { OpsFace } from '../ops/index.js';
import type { NotificationsFace } from '../notifications/index.js';
import { DOCTOR_OPTIONS, resolveDoctorOptions, STATUS_LIST } from './index.js';
import { raiseDoctorAlerts } from './doctor-alerts.js';

const defineJob = jobsFor<DoctorServices & OpsFace & NotificationsFace>();

/**
 * doctor: hourly (cron, so a start does not run it at once), cluster-wide, the same checks as
 * `relay-jobs doctor`: records each check's newest result in `doctor_checks` (fenced by the
 * round's token), sets `relay_jobs_doctor_check{check,status}` on the replica that ran it, and
 * fires an ops alert event (rule `doctor`) for each check that turns `fail`
 * (`jobs.doctor.alert: false` only records). A `fail` does not fail the round: the round did its
 * work, the deployment is what is unwell.
 */
export const doctorJob = defineJob({
  name: 'doctor',
  description: 'Runs the relay-jobs doctor checks against the live deployment, records them, and raises an ops alert for each check that turns fail',
  scope: 'cluster',
  options: DOCTOR_OPTIONS,
  defaults: { enabled: true, cron: '7 * * * *', timeout: '5m' },
  needs: ['doctor', 'ops', 'notifier', 'metrics'],
  async run(ctx, { doctor, ops, notifier, metrics }, o, config) {
    const report = await doctor.run();
    for (const c of report.checks) for (const s of STATUS_LIST) metrics.doctorCheck.set({ check: c.name, status: s }, c.status === s ? 1 : 0);
    await doctor.facts.record(report.checks, ctx.instanceId, ctx.fencingToken);
    const alerts = resolveDoctorOptions(o).alert
      ? await raiseDoctorAlerts({ ops, config, channels: notifier.channels.keys(), job: ctx.job, token: ctx.fencingToken, now: ctx.clock.now(), report, log: ctx.log })
      : { fired: 0, resolved: 0 };
    const count = (s: string) => report.checks.filter((c) => c.status === s).length;
    const failing = report.checks.filter((c) => c.status === 'fail').map((c) => c.name);
    return {
      items: report.checks.length,
      note: `${count('ok')} ok, ${count('warn')} warn, ${count('fail')} fail${failing.length ? ` (${failing.join(', ')})` : ''}; alerts ${alerts.fired} fired, ${alerts.resolved} resolved`,
    };
  },
});

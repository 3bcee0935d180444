import { z } from 'zod';
import { jobsFor } from '../../jobs/define-job.js';
import type { OpsServices } from './wiring.js';
import type { NotificationsFace } from '../notifications/index.js';
import { CLEANUP_TARGETS } from './store/ops-retention.js';
import { OpsMetrics } from './metrics.js';

const DAY = 86_400_000;

const defineJob = jobsFor<OpsServices & NotificationsFace>();

/**
 * ops_cleanup, the one retention round: for each target (store/ops-retention.ts), the retention
 * in days from the API override or `ops.retention_days`: rows older than that go in batches of
 * `jobs.ops_cleanup.batch` (one short transaction each); 0 empties the target, a negative value
 * skips it. Then finished `job_runs` older than `scheduler.run_retention` (their one setting;
 * `ops.retention_days.job_runs` is its deprecated alias), in the same batches. A target that
 * fails is reported in the round's note, fails the round (health shows it), and the others
 * still run.
 */
export const opsCleanupJob = defineJob({
  name: 'ops_cleanup',
  description: 'Deletes ops metrics, alert events, delivered notifications and run records past their retention',
  scope: 'cluster',
  options: { batch: z.coerce.number().int().positive().optional() },
  defaults: (config) => ({ enabled: true, cron: '0 2 * * *', timezone: config.ops.timezone, timeout: '30m' }),
  needs: ['ops', 'metrics'],
  async run(ctx, { ops, metrics }, o, config) {
    const m = metrics.group(OpsMetrics);
    const batch = o.batch ?? 5000;
    const days = { ...config.ops.retention_days, ...(await ops.retention.overrides()) };
    const done: string[] = [];
    const failed: string[] = [];
    let total = 0;
    /** Deletes batch after batch until one comes back short; a failure is the target's, not the round's. */
    const drain = async (target: string, deleteBatch: () => Promise<number>) => {
      let n = 0;
      try {
        for (;;) {
          if (ctx.signal.aborted) throw ctx.signal.reason;
          const k = await deleteBatch();
          n += k;
          if (k < batch) break;
        }
        done.push(`${target}: ${n}`);
      } catch (err) {
        failed.push(`${target}: FAILED after ${n}: ${(err as Error).message}`);
        m.cleanupFailures.inc({ target });
      }
      if (n) m.cleanupDeleted.inc({ target }, n);
      total += n;
    };
    for (const target of Object.keys(CLEANUP_TARGETS)) {
      const d = days[target];
      if (d === undefined || d < 0) {
        done.push(`${target}: skipped`);
        continue;
      }
      const before = d === 0 ? null : new Date(ctx.clock.now() - d * DAY);
      await drain(target, () => ops.retention.deleteBatch(target, before, batch));
    }
    // Only finished runs go: a running record is a round in flight (its lease, its health).
    await drain('job_runs', () => ops.runRecords.prune(config.scheduler.run_retention, batch, 1));
    const note = [...done, ...failed].join('; ');
    if (failed.length) throw new Error(`ops_cleanup: ${failed.length} target(s) failed: ${note}`);
    return { items: total, note };
  },
});

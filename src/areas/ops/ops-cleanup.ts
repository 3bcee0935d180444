import { AppError } from '../../errors/app-error.js';
import { z } from 'zod';
import { jobsFor } from '../../modules/define-job.js';
import type { OpsServices } from './wiring.js';
import type { NotificationsFace } from '../notifications/index.js';
import { CLEANUP_TARGETS, type RollupCover } from './store/ops-retention.js';
import { OpsMetrics } from './metrics.js';

const DAY = 86_400_000;

const defineJob = jobsFor<OpsServices & NotificationsFace>();

/**
 * ops_cleanup, the one retention round: for each target (store/ops-retention.ts), the retention
 * in days from the API override or `ops.retention_days`: rows older than that go in batches of
 * `jobs.ops_cleanup.batch` (one short transaction each); 0 empties the target, a negative value
 * skips it. Then finished `job_runs` older than `scheduler.run_retention` (their one setting;
 * `ops.retention_days.job_runs` is its deprecated alias), and the `instances` rows of replicas
 * silent past the dead-replica horizon, in the same batches. A target that
 * fails is reported in the round's note, fails the round (health shows it), and the others
 * still run.
 *
 * A target a rollup folds (minute buckets into hours, hours into days) is deleted only below its
 * rollup's watermark, the rule usage_cleanup keeps: rows ops_aggregation has not covered yet are
 * never deleted, whatever the retention says. The cutoff is aligned down to the rollup's bucket,
 * so a bucket the aggregation re-reads (its overlap) is deleted whole or not at all, never left
 * half and folded again. Uncovered rows older than the retention fail the target, naming the
 * watermark. 0, the operator's explicit "empty it", deletes everything the rollup has covered and
 * nothing past it, whether it comes from the config file or an API override.
 */
/** Rows past retention that the target's rollup has not covered: kept, and the target fails naming why. */
class UncoveredRows extends AppError {
  constructor(cutoff: Date, covered: Date | null, cover: RollupCover) {
    super(
      'conflict',
      'unaggregated_ops_rows',
      `refusing to delete rows before ${cutoff.toISOString()}: ${cover.job} has only covered buckets before ${covered?.toISOString() ?? '(nothing yet)'} (${cover.key}); ` +
        `fix the aggregation (GET /api/v1/jobs/${cover.job}) and the next round deletes them`,
    );
  }
}

/**
 * The delete cutoff of a folded target: the retention's cutoff aligned down to the rollup's bucket,
 * never past the rollup's watermark (no watermark: nothing is covered, nothing goes).
 */
export function coveredCutoff(cutoff: Date | null, covered: Date | null, cover: RollupCover): Date {
  if (!covered) return new Date(0);
  if (!cutoff) return covered;
  const aligned = Math.floor(cutoff.getTime() / cover.alignMs) * cover.alignMs;
  return new Date(Math.min(aligned, covered.getTime()));
}

export const opsCleanupJob = defineJob({
  name: 'ops_cleanup',
  description: 'Deletes ops metrics (never before the aggregation watermark), alert events, delivered notifications, dead letters, run records and gone replicas past their retention',
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
    const drain = async (target: string, deleteBatch: () => Promise<number>, after?: () => Promise<void>) => {
      let n = 0;
      try {
        for (;;) {
          if (ctx.signal.aborted) throw ctx.signal.reason;
          const k = await deleteBatch();
          n += k;
          if (k < batch) break;
        }
        await after?.();
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
      const cutoff = d === 0 ? null : new Date(ctx.clock.now() - d * DAY);
      const cover = CLEANUP_TARGETS[target]!.coveredBy;
      // 0 is the operator's "empty it": for a folded target, everything the rollup has covered (never past its watermark).
      if (!cover) {
        await drain(target, () => ops.retention.deleteBatch(target, cutoff, batch));
        continue;
      }
      let covered: Date | null;
      try {
        covered = await ops.retention.coveredUntil(cover);
      } catch (err) {
        failed.push(`${target}: FAILED after 0: ${(err as Error).message}`);
        m.cleanupFailures.inc({ target });
        continue;
      }
      const before = coveredCutoff(cutoff, covered, cover);
      await drain(
        target,
        () => ops.retention.deleteBatch(target, before, batch),
        async () => {
          if (cutoff && (await ops.retention.anyBetween(target, covered, cutoff))) throw new UncoveredRows(cutoff, covered, cover);
        },
      );
    }
    // Only finished runs go: a running record is a round in flight (its lease, its health).
    await drain('job_runs', () => ops.runRecords.prune(config.scheduler.run_retention, batch, 1));
    // Replicas silent past the doctor's dead-replica horizon (7 days): nothing names them any more.
    await drain('instances', () => ops.instances.prune(batch));
    const note = [...done, ...failed].join('; ');
    if (failed.length) throw new Error(`ops_cleanup: ${failed.length} target(s) failed: ${note}`);
    return { items: total, note };
  },
});

import type { Config } from '../../config/load.js';
import type { JobContext } from '../../scheduler/job.js';
import { jobsFor } from '../../modules/define-job.js';
import type { UsageServices } from './wiring.js';
import type { KernelServices } from '../../modules/wiring.js';

type Deps = Pick<UsageServices & KernelServices, 'usageStore' | 'rollups' | 'cleanupTasks' | 'metrics'>;
import { rebuildRange } from './rollup-rebuild.js';
import { AppError } from '../../errors/app-error.js';
import { UsageMetrics } from './metrics.js';
import { monotonic } from '../../time/wall.js';

const DAY = 86_400_000;
const LAST_SWEEP = 'last_retention_sweep';

const defineJob = jobsFor<UsageServices>();

/** The cleanup would delete raw rows the rollups do not cover yet: refused, and the round fails. */
export class UnaggregatedUsage extends AppError {
  constructor(cutoff: Date, watermark: Date | null) {
    super(
      'conflict',
      'unaggregated_usage',
      `refusing to delete raw usage before ${cutoff.toISOString()}: dashboard_aggregation has only covered hours before ${watermark?.toISOString() ?? '(nothing yet)'}; ` +
        'fix the aggregation (GET /api/v1/jobs/dashboard_aggregation) and the next round deletes',
    );
  }
}

/**
 * Retention (every `usage.cleanup_every`): raw usage older than `usage.retention` (whole UTC days
 * dropped as partitions, the partial day deleted in batches of `usage.delete_batch`), the request
 * id index alongside it, hourly and daily rollups past theirs. Partitions for every day usage
 * accepts (the past window and the days ahead) are created if missing. Raw rows the aggregation has not covered are never deleted: the round fails
 * with the reason instead, so the job's health turns red.
 */
async function retentionSweep(ctx: JobContext, s: Deps, config: Config): Promise<number> {
  const um = s.metrics.group(UsageMetrics);
  const u = config.usage;
  const now = ctx.clock.now();
  const cutoff = new Date(now - u.retention);
  const wm = await s.rollups.coveredUntil();
  // The seed's rule: rows in [watermark, cutoff) are not in any rollup yet; deleting them would lose them for good.
  if ((!wm || wm < cutoff) && (await s.usageStore.any(wm, cutoff))) throw new UnaggregatedUsage(cutoff, wm);
  const started = monotonic();
  let deleted = 0;
  for (const p of await s.usageStore.partitions()) {
    ctx.signal.throwIfAborted();
    if (p.dayStart + DAY <= cutoff.getTime()) {
      const n = await s.usageStore.dropPartition(p.name, p.dayStart);
      um.usageDeleted.inc({ kind: 'raw_partition' }, n);
      deleted += n;
      ctx.log.info({ partition: p.name, rows: n }, 'usage partition dropped');
    }
  }
  for (let from: Date | undefined; ;) {
    ctx.signal.throwIfAborted();
    const r = await s.usageStore.deleteBatch({ before: cutoff, from }, u.delete_batch);
    um.usageDeleted.inc({ kind: 'raw_batch' }, r.deleted);
    deleted += r.deleted;
    if (r.deleted < u.delete_batch) break;
    from = r.latest ?? from;
  }
  for (;;) {
    const n = await s.usageStore.deleteRequestIds(cutoff, u.delete_batch);
    um.usageDeleted.inc({ kind: 'request_ids' }, n);
    if (n < u.delete_batch) break;
  }
  const hourly = await s.rollups.deleteOlder('usage_hourly', new Date(now - u.hourly_retention), u.delete_batch);
  const daily = await s.rollups.deleteOlder('usage_daily', new Date(now - u.daily_retention), u.delete_batch);
  um.usageDeleted.inc({ kind: 'hourly' }, hourly);
  um.usageDeleted.inc({ kind: 'daily' }, daily);
  await s.usageStore.ensureAcceptedWindow(now, u.retention, u.partitions_ahead);
  um.usageCleanupSeconds.observe({ kind: 'retention' }, (monotonic() - started) / 1000);
  ctx.log.info({ raw_deleted: deleted, hourly_deleted: hourly, daily_deleted: daily, cutoff: cutoff.toISOString() }, 'usage retention sweep done');
  return deleted + hourly + daily;
}

/** Admin range cleanups: one claimed task per round (a locked pick; a dead replica's task is reclaimed after `usage.task_timeout`). */
async function runTask(ctx: JobContext, s: Deps, config: Config): Promise<number> {
  const task = await s.cleanupTasks.claim(ctx.instanceId, config.usage.task_timeout);
  if (!task) return 0;
  const started = monotonic();
  const um = s.metrics.group(UsageMetrics);
  ctx.log.info({ task_id: task.id, user_id: task.user_id, account_id: task.account_id, from: task.range_start, to: task.range_end }, 'usage cleanup task claimed');
  let deleted = task.deleted_rows;
  let from = new Date(task.range_start);
  for (;;) {
    ctx.signal.throwIfAborted();
    if (!(await s.cleanupTasks.heartbeat(task.id, ctx.instanceId, deleted))) {
      ctx.log.info({ task_id: task.id, deleted }, 'usage cleanup task cancelled or taken over; stopping');
      return deleted - task.deleted_rows;
    }
    const r = await s.usageStore.deleteBatch({ from, to: new Date(task.range_end), userId: task.user_id, accountId: task.account_id }, config.usage.delete_batch);
    deleted += r.deleted;
    if (r.latest && r.latest > from) from = r.latest;
    um.usageDeleted.inc({ kind: 'task' }, r.deleted);
    if (r.deleted < config.usage.delete_batch) break;
  }
  // The rollups of the range no longer match the raw rows: rebuild them (the watermark does not move).
  await rebuildRange(s.rollups, new Date(task.range_start), new Date(task.range_end), () => undefined, ctx.signal);
  await s.cleanupTasks.finish(task.id, ctx.instanceId, deleted);
  um.usageCleanupSeconds.observe({ kind: 'task' }, (monotonic() - started) / 1000);
  ctx.log.info({ task_id: task.id, deleted }, 'usage cleanup task done; rollups of its range rebuilt');
  return deleted - task.deleted_rows;
}

/** usage_cleanup: admin range tasks every round (every minute); the retention sweep every `usage.cleanup_every`. */
export const usageCleanupJob = defineJob({
  name: 'usage_cleanup',
  description: 'Deletes raw usage past retention (never unaggregated rows), old rollups and request ids, runs admin range cleanups, creates partitions ahead',
  scope: 'cluster',
  defaults: { enabled: true, every: '1m', timeout: '30m' },
  needs: ['usageStore', 'rollups', 'cleanupTasks', 'metrics'],
  async run(ctx, s, _o, config) {
    let items = await runTask(ctx, s, config);
    const last = await ctx.cursor.read<number>(LAST_SWEEP);
    if (!last || ctx.clock.now() - last >= config.usage.cleanup_every || ctx.trigger === 'manual') {
      items += await retentionSweep(ctx, s, config);
      await ctx.cursor.write(LAST_SWEEP, ctx.clock.now());
    }
    return { items };
  },
});

import { jobsFor } from '../../modules/define-job.js';
import type { SchedulerSnapshotServices } from './wiring.js';
import { SchedulerMetrics } from './metrics.js';

const defineJob = jobsFor<SchedulerSnapshotServices>();

/**
 * scheduler_snapshot: on every replica, the outbox consumer runs on its own loop (woken by the
 * outbox's notifications, else a poll each `snapshot.poll_interval`, started with the process);
 * each round of this job (every 30 s: the loop applies changes, the round only judges them) runs
 * a poll's checks without claiming (a backlog makes it a poll),
 * publishes the snapshot's per-bucket age and epoch, and fails while the outbox lag is at or past
 * `snapshot.lag_bound`, so the job's health reads `failing` exactly while the snapshot is behind.
 */
export const schedulerSnapshotJob = defineJob({
  name: 'scheduler_snapshot',
  description: 'Applies scheduler outbox events to the routing snapshot (Redis buckets or memory), rebuilding it when it falls behind or is lost',
  scope: 'instance',
  defaults: { enabled: true, every: '30s', timeout: '30s' },
  needs: ['snapshotConsumer', 'schedulerSnapshot', 'metrics'],
  loops: ['scheduler_outbox'],
  onStart({ snapshotConsumer }) {
    snapshotConsumer.start();
  },
  onStop: ({ snapshotConsumer }, by) => snapshotConsumer.stop(by),
  async run(ctx, { snapshotConsumer, schedulerSnapshot, metrics }, _o, config) {
    const r = await snapshotConsumer.observe();
    const m = metrics.group(SchedulerMetrics);
    for (const g of await schedulerSnapshot.bucketGauges()) {
      m.snapshotAge.set({ bucket: g.bucket }, g.ageSeconds);
      m.snapshotEpoch.set({ bucket: g.bucket }, g.epoch);
    }
    const note = `applied ${r.applied}, backlog ${r.backlog}, lag ${r.lagSeconds.toFixed(1)}s${snapshotConsumer.latched ? ', rebuild latched' : ''}`;
    if (r.lagSeconds * 1000 >= config.snapshot.lag_bound)
      throw new Error(`scheduler outbox lag ${r.lagSeconds.toFixed(1)}s is at or past snapshot.lag_bound (${config.snapshot.lag_bound / 1000}s): ${note}`);
    ctx.log.debug({ applied: r.applied, backlog: r.backlog, lag_seconds: r.lagSeconds }, 'scheduler snapshot round');
    return { items: r.applied, note };
  },
});

import { jobsFor } from '../../modules/define-job.js';
import type { UsageServices } from './wiring.js';

const defineJob = jobsFor<UsageServices>();

/**
 * platform_quota_flusher: on every replica, once a minute, flushes whatever is still dirty (SPOP
 * hands each dirty key to one replica) and records a round, so health shows the flush path
 * failing (Redis or PostgreSQL refusing) and a crashed replica's dirty keys are written. The
 * flushing itself is the QuotaFlushLoop (quota-flush-loop.ts): `quota.flush_delay` after the first increment.
 */
export const platformQuotaFlusherJob = defineJob({
  name: 'platform_quota_flusher',
  description: 'Writes dirty per-user platform usage counters to PostgreSQL in batches (the flush loop does it quota.flush_delay after an increment; this round is its health and backstop)',
  scope: 'instance',
  defaults: { enabled: true, every: '1m', timeout: '1m' },
  needs: ['quota', 'quotaFlush'],
  // The usage area's per-replica job: its health also carries the usage writer's flush (usage-writer.ts), which has no job of its own.
  loops: ['platform_quota_flush', 'usage_writer'],
  onStart({ quotaFlush }) {
    quotaFlush.start();
  },
  onStop: ({ quotaFlush }, by) => quotaFlush.stop(by),
  async run(ctx, { quota }) {
    const r = await quota.flushAll(1000);
    await quota.dirtyCount();
    if (r.stale) ctx.log.info({ stale: r.stale }, 'quota snapshots older than the stored value were skipped (a reset or a newer flush won)');
    return { items: r.flushed, note: r.dirty ? `${r.dirty} dirty, ${r.flushed} flushed, ${r.stale} stale, ${r.reAdded} re-added` : undefined };
  },
});

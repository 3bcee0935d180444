import { jobsFor } from '../../jobs/define-job.js';
import type { UsageServices } from './wiring.js';

const defineJob = jobsFor<UsageServices>();

/** platform_quota_flusher: on every replica (SPOP hands each dirty key to one of them), every 5 s. */
export const platformQuotaFlusherJob = defineJob({
  name: 'platform_quota_flusher',
  description: 'Writes dirty per-user platform usage counters to PostgreSQL in batches',
  scope: 'instance',
  defaults: { enabled: true, every: '5s', timeout: '1m' },
  needs: ['quota'],
  async run(ctx, { quota }) {
    const r = await quota.flushAll(1000);
    await quota.dirtyCount();
    if (r.stale) ctx.log.info({ stale: r.stale }, 'quota snapshots older than the stored value were skipped (a reset or a newer flush won)');
    return { items: r.flushed, note: r.dirty ? `${r.dirty} dirty, ${r.flushed} flushed, ${r.stale} stale, ${r.reAdded} re-added` : undefined };
  },
});

import { defineJob } from '../define-job.js';

/** idempotency_cleanup: deletes idempotency records past their TTL, `usage.delete_batch` per transaction. */
export const idempotencyCleanupJob = defineJob({
  name: 'idempotency_cleanup',
  description: 'Deletes expired idempotency records in small batches',
  scope: 'cluster',
  defaults: { enabled: true, every: '1h', timeout: '5m' },
  needs: ['idempotency'],
  async run(ctx, { idempotency }, _o, config) {
    const deleted = await idempotency.deleteExpired(config.usage.delete_batch, ctx.signal);
    if (deleted) ctx.log.info({ deleted }, 'expired idempotency records deleted');
    return { items: deleted };
  },
});

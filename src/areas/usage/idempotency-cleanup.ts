import { z } from 'zod';
import { numeric } from '../../config/schema.js';
import { jobsFor } from '../../modules/define-job.js';
import type { UsageServices } from './wiring.js';

const defineJob = jobsFor<UsageServices>();

/**
 * idempotency_cleanup: deletes idempotency records past their TTL. The seed's cadence: every
 * 60 s, `jobs.idempotency_cleanup.batch` (500) rows per delete transaction, so each round is a
 * few short transactions and expired records never pile up for an hour.
 */
export const idempotencyCleanupJob = defineJob({
  name: 'idempotency_cleanup',
  description: 'Deletes expired idempotency records in small batches',
  scope: 'cluster',
  options: { batch: numeric(z.number().int().positive().max(100_000)).optional() },
  defaults: { enabled: true, every: '60s', timeout: '5m' },
  needs: ['idempotency'],
  async run(ctx, { idempotency }, o) {
    const deleted = await idempotency.deleteExpired(o.batch ?? 500, ctx.signal);
    if (deleted) ctx.log.info({ deleted }, 'expired idempotency records deleted');
    return { items: deleted };
  },
});

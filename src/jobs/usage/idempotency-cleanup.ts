import { resolveJobSettings } from '../../config/job-settings.js';
import type { Config } from '../../config/load.js';
import type { JobDefinition } from '../../scheduler/job.js';
import type { JobServices } from '../services.js';

/** idempotency_cleanup: deletes idempotency records past their TTL, `usage.delete_batch` per transaction. */
export function idempotencyCleanupJob(config: Config, services: JobServices): JobDefinition {
  return {
    name: 'idempotency_cleanup',
    description: 'Deletes expired idempotency records in small batches',
    scope: 'cluster',
    settings: resolveJobSettings('idempotency_cleanup', { enabled: true, every: 3_600_000, timeout: 5 * 60_000 }, config.jobs.idempotency_cleanup),
    async run(ctx) {
      const deleted = await services.get().idempotency.deleteExpired(config.usage.delete_batch, ctx.signal);
      if (deleted) ctx.log.info({ deleted }, 'expired idempotency records deleted');
      return { items: deleted };
    },
  };
}

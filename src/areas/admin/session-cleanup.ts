import { jobsFor } from '../../modules/define-job.js';
import type { AdminServices } from './wiring.js';

const BATCH = 1000;

const defineJob = jobsFor<AdminServices>();

/** codex-proxy-rs's SessionCleanupScheduler: drop admin sessions past `expires_at`, every `admin.session_cleanup_interval_secs`. */
export const sessionCleanupJob = defineJob({
  name: 'session_cleanup',
  description: 'Deletes admin sessions past their expiry',
  scope: 'cluster',
  defaults: (config) => ({ enabled: true, every: `${config.admin.session_cleanup_interval_secs}s`, timeout: '1m' }),
  needs: ['sessions'],
  async run(ctx, { sessions }) {
    let deleted = 0;
    for (;;) {
      ctx.signal.throwIfAborted();
      const n = await sessions.deleteExpired(BATCH);
      deleted += n;
      if (n < BATCH) break;
    }
    if (deleted > 0) ctx.log.info({ deleted }, 'expired admin sessions deleted');
    return { items: deleted };
  },
});

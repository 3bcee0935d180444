import { defineJob } from '../define-job.js';

const BATCH = 1000;
// Small batches keep each transaction short however many sessions expired at once.
const DELETE_EXPIRED = `DELETE FROM admin_sessions WHERE id IN (SELECT id FROM admin_sessions WHERE expires_at <= clock_timestamp() LIMIT ${BATCH})`;

/** codex-proxy-rs's SessionCleanupScheduler: drop admin sessions past `expires_at`, every `admin.session_cleanup_interval_secs`. */
export const sessionCleanupJob = defineJob({
  name: 'session_cleanup',
  description: 'Deletes admin sessions past their expiry',
  scope: 'cluster',
  defaults: (config) => ({ enabled: true, every: `${config.admin.session_cleanup_interval_secs}s`, timeout: '1m' }),
  needs: [],
  async run(ctx) {
    let deleted = 0;
    for (;;) {
      ctx.signal.throwIfAborted();
      const { rowCount } = await ctx.db.query(DELETE_EXPIRED);
      deleted += rowCount;
      if (rowCount < BATCH) break;
    }
    if (deleted > 0) ctx.log.info({ deleted }, 'expired admin sessions deleted');
    return { items: deleted };
  },
});

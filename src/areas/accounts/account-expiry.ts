import { jobsFor } from '../../modules/define-job.js';
import type { AccountsServices } from './wiring.js';
import { pauseExpiredAccounts } from './store/account-expiry.js';
import { AccountMetrics } from './metrics.js';

const defineJob = jobsFor<AccountsServices>();

/**
 * account_expiry: accounts with `auto_pause_on_expired` past their `expires_at` stop being
 * schedulable. They are not deleted and their status is kept, so renewing the date and setting
 * `schedulable` again is all it takes to bring one back.
 */
export const accountExpiryJob = defineJob({
  name: 'account_expiry',
  description: 'Makes accounts past their expiry date unschedulable (auto_pause_on_expired) and records the change for the scheduler snapshot',
  scope: 'cluster',
  defaults: { enabled: true, every: '1m', timeout: '30s' },
  needs: ['metrics'],
  async run(ctx, { metrics }) {
    const paused = await pauseExpiredAccounts(ctx.db);
    if (paused > 0) {
      metrics.group(AccountMetrics).accountsAutoPaused.inc(paused);
      ctx.log.info({ paused }, 'expired accounts paused');
    }
    return { items: paused };
  },
});

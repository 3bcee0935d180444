import { jobsFor } from '../../modules/define-job.js';
import type { AccountsServices } from './wiring.js';

const defineJob = jobsFor<AccountsServices>();

/**
 * token_refresh: on every replica (scope `instance`), each round syncs the refresh schedule
 * with the accounts table, so new and changed accounts are picked up without a restart. The
 * refreshes themselves run on the schedule's timers, never inside the round, so start-up
 * never waits on them.
 */
export const tokenRefreshJob = defineJob({
  name: 'token_refresh',
  description: 'Keeps the OAuth refresh schedule in step with the accounts table; refreshes run on per-account due times',
  scope: 'instance',
  // The due-queue that fires the refreshes (due-queue.ts): its failures and stalls are this job's.
  loops: ['token_refresh_due'],
  defaults: (config) => ({ enabled: config.auth.refresh_enabled, every: '30s', timeout: '1m', jitter: '2s' }),
  needs: ['tokenRefresh'],
  // Arm the refresh schedule at start rather than at the first round; never awaited.
  onStart({ tokenRefresh }, log) {
    void tokenRefresh.sync().catch((err) => log.warn({ err: (err as Error).message }, 'initial token refresh sync failed; the next token_refresh round retries'));
  },
  onStop: ({ tokenRefresh }, by) => tokenRefresh.stop(by),
  async run(ctx, { tokenRefresh }) {
    const { armed, seen } = await tokenRefresh.sync(ctx.signal);
    return { items: armed, note: `${seen} accounts read, ${armed} timers armed` };
  },
});

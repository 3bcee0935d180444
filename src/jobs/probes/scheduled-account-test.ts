import { defineJob } from '../define-job.js';

/**
 * scheduled_account_test: due test plans are claimed by every replica's AccountTestRunner with an
 * atomic UPDATE … RETURNING (started with the job), at most `scheduled_account_test.concurrency`
 * at once cluster-wide. The round only reports how many plans are waiting past their time.
 */
export const scheduledAccountTestJob = defineJob({
  name: 'scheduled_account_test',
  description: 'Runs scheduled account tests once per cron occurrence cluster-wide; auto-recovers accounts that pass',
  scope: 'cluster',
  defaults: { enabled: true, every: '1m', timeout: '30s' },
  needs: ['accountTestRunner', 'accountTests'],
  onStart({ accountTestRunner }) {
    accountTestRunner.start();
  },
  onStop: ({ accountTestRunner }, withinMs) => accountTestRunner.stop(withinMs),
  async run(_ctx, { accountTests }) {
    const overdue = await accountTests.overdue(60_000);
    return { items: 0, note: `${overdue} plans more than a minute past their next_run_at` };
  },
});

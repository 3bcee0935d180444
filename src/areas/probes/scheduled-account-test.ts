import { jobsFor } from '../../modules/define-job.js';
import type { ProbeServices } from './wiring.js';

const defineJob = jobsFor<ProbeServices>();

/** A plan this long past its next_run_at, unleased, was missed: the job is late. */
const OVERDUE_MS = 60_000;

/**
 * scheduled_account_test: due test plans are claimed by every replica's AccountTestRunner with an
 * atomic UPDATE … RETURNING (started with the job), at most `scheduled_account_test.concurrency`
 * at once cluster-wide. The tests run outside the rounds, so the round reports what ran since the
 * previous round (its items; a fenced cursor marks where it counted to) and the plans waiting
 * past their time; the job's health is late while any plan is more than a minute overdue.
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
  onStop: ({ accountTestRunner }, by) => accountTestRunner.stop(by),
  async health({ accountTests }, h) {
    const { overdue, oldestDueAt } = await accountTests.overdueSince(OVERDUE_MS);
    if (!overdue) return null;
    const waited = oldestDueAt ? `, the oldest due since ${oldestDueAt.toISOString()} (${Math.round((h.nowMs - oldestDueAt.getTime()) / 1000)}s)` : '';
    return {
      health: 'late',
      reason: `${overdue} test plan(s) more than a minute past their next run${waited}: no replica's runner is taking them (runner stopped, or scheduled_account_test.concurrency too small)`,
    };
  },
  async run(ctx, { accountTests }) {
    const from = await ctx.cursor.read<string>('counted_to');
    const { ran, failed, upto } = await accountTests.ranSince(from ? new Date(from) : null);
    const { overdue } = await accountTests.overdueSince(OVERDUE_MS);
    await ctx.cursor.write('counted_to', upto.toISOString());
    return { items: ran, note: `${ran} tests ran since ${from ?? 'an hour ago'} (${failed} failed); ${overdue} plans more than a minute past their next run` };
  },
});

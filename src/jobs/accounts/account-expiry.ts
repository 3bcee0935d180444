import { defineJob } from '../define-job.js';

// One statement: pause every due account and record one outbox event listing them, atomically.
const PAUSE_EXPIRED = `
WITH paused AS (
  UPDATE accounts SET schedulable = false, updated_at = clock_timestamp()
  WHERE auto_pause_on_expired AND schedulable AND expires_at <= clock_timestamp()
  RETURNING id
), event AS (
  INSERT INTO scheduler_outbox (event_type, payload)
  SELECT 'account_bulk_changed', jsonb_build_object('reason', 'account_expired', 'account_ids', jsonb_agg(id ORDER BY id)) FROM paused
  HAVING count(*) > 0
  RETURNING id
)
SELECT (SELECT count(*) FROM paused) AS paused, (SELECT count(*) FROM event) AS events`;

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
    const { rows } = await ctx.db.query<{ paused: string }>(PAUSE_EXPIRED);
    const paused = Number(rows[0]!.paused);
    if (paused > 0) {
      metrics.accountsAutoPaused.inc(paused);
      ctx.log.info({ paused }, 'expired accounts paused');
    }
    return { items: paused };
  },
});

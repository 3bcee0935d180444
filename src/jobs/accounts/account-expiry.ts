import { resolveJobSettings } from '../../config/job-settings.js';
import type { Config } from '../../config/load.js';
import type { JobDefinition } from '../../scheduler/job.js';
import type { JobServices } from '../services.js';

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
export function accountExpiryJob(config: Config, services: JobServices): JobDefinition {
  return {
    name: 'account_expiry',
    description: 'Makes accounts past their expiry date unschedulable (auto_pause_on_expired) and records the change for the scheduler snapshot',
    scope: 'cluster',
    settings: resolveJobSettings('account_expiry', { enabled: true, every: 60_000, timeout: 30_000 }, config.jobs.account_expiry),
    async run(ctx) {
      const { rows } = await ctx.db.query<{ paused: string }>(PAUSE_EXPIRED);
      const paused = Number(rows[0]!.paused);
      if (paused > 0) {
        services.get().metrics.accountsAutoPaused.inc(paused);
        ctx.log.info({ paused }, 'expired accounts paused');
      }
      return { items: paused };
    },
  };
}

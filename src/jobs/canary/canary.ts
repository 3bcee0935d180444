import { resolveJobSettings } from '../../config/job-settings.js';
import type { Config } from '../../config/load.js';
import type { JobDefinition } from '../../scheduler/job.js';
import { sleep } from '../../time/clock.js';

const MARK = 'INSERT INTO canary_runs (slot, instance_id, fencing_token, phase) VALUES ($1::timestamptz, $2, $3, $4)';

/**
 * A synthetic job that proves the scheduler is alive and coordinated. Each round writes a
 * `start` row, sleeps `jobs.canary.sleep` so that an overlap would be visible, advances a fenced
 * cursor, and writes an `end` row. Disabled by default.
 */
export function canaryJob(config: Config): JobDefinition {
  const sleepMs = config.jobs.canary?.sleep ?? 500;
  const { sleep: _sleep, ...settings } = config.jobs.canary ?? {};
  return {
    name: 'canary',
    description: 'Synthetic round that records start/end rows; proves the scheduler runs each slot once',
    scope: 'cluster',
    settings: resolveJobSettings('canary', { enabled: false, every: 60_000, timeout: Math.max(10_000, sleepMs * 2) }, settings),
    async run(ctx) {
      const slot = ctx.slot.toISOString();
      await ctx.db.query(MARK, [slot, ctx.instanceId, ctx.fencingToken, 'start']);
      if (!(await sleep(ctx.clock, sleepMs, ctx.signal))) throw ctx.signal.reason;
      await ctx.cursor.write('last_slot', slot);
      await ctx.db.query(MARK, [slot, ctx.instanceId, ctx.fencingToken, 'end']);
      return { items: 1, note: `slept ${sleepMs}ms` };
    },
  };
}

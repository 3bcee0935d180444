import { duration } from '../../config/schema.js';
import { sleep } from '../../time/clock.js';
import { jobsFor } from '../../modules/define-job.js';
import type { CanaryServices } from './wiring.js';

const defineJob = jobsFor<CanaryServices>();

/**
 * A synthetic job that proves the scheduler is alive and coordinated. Each round writes a
 * `start` row, sleeps `jobs.canary.sleep` so that an overlap would be visible, then advances a
 * fenced cursor and writes its `end` row in one statement (the row only if the fence accepted
 * the write). Disabled by default.
 */
export const canaryJob = defineJob({
  name: 'canary',
  description: 'Synthetic round that records start/end rows; proves the scheduler runs each slot once',
  scope: 'cluster',
  options: { sleep: duration.default(500) },
  defaults: (_config, o) => ({ enabled: false, every: '1m', timeout: `${Math.max(10_000, o.sleep * 2)}ms` }),
  needs: ['canaryRuns'],
  async run(ctx, { canaryRuns }, o) {
    await canaryRuns.mark(ctx.slot, ctx.instanceId, ctx.fencingToken, 'start');
    if (!(await sleep(ctx.clock, o.sleep, ctx.signal))) throw ctx.signal.reason;
    // The fenced cursor and the end row in one statement (issue 26: a slot costs claim, start, end, completion).
    // A lost lease aborts the signal (the local check ctx.cursor.write makes); the database refuses a stale token.
    ctx.signal.throwIfAborted();
    await canaryRuns.endFenced(ctx.job, 'last_slot', ctx.slot.toISOString(), ctx.slot, ctx.instanceId, ctx.fencingToken);
    return { items: 1, note: `slept ${o.sleep}ms` };
  },
});

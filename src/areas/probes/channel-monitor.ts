import { jobsFor } from '../../modules/define-job.js';
import type { ProbeServices } from './wiring.js';
import { WatermarkFenced } from './store/monitor-history.js';
import { ProbesMetrics } from './metrics.js';

const TRAILING_MS = 10 * 60_000;
const BOOTSTRAP_MS = 2 * 3_600_000;
const MAX_SPAN_MS = 35 * 86_400_000;
const PRUNE_BATCH = 10_000;

const defineJob = jobsFor<ProbeServices>();

/**
 * channel_monitor: the probes themselves run on every replica's MonitorRunner, claimed from the
 * monitors' due times in PostgreSQL (started with the job, stopped with it). The round, once
 * per slot in the cluster, maintains what is shared: minute rollups from the fenced watermark
 * (re-aggregating a trailing window), retention of raw results and rollups, and the due/overdue gauges.
 */
export const channelMonitorJob = defineJob({
  name: 'channel_monitor',
  description: 'Probes channel monitors once per interval cluster-wide; rounds roll up minutes and prune history',
  scope: 'cluster',
  defaults: { enabled: true, every: '1m', timeout: '5m' },
  needs: ['monitorRunner', 'monitors', 'monitorHistory', 'metrics'],
  onStart({ monitorRunner }) {
    monitorRunner.start();
  },
  onStop: ({ monitorRunner }, by) => monitorRunner.stop(by),
  // The probes run outside the rounds: a dead or saturated runner shows here, not in them. Late
  // when an unleased monitor is a whole interval of its own past due (a probe was missed).
  async health({ monitors }, h) {
    const { missed, oldestDueAt } = await monitors.missedIntervals();
    if (!missed) return null;
    const waited = oldestDueAt ? `, the oldest due since ${oldestDueAt.toISOString()} (${Math.round((h.nowMs - oldestDueAt.getTime()) / 1000)}s)` : '';
    return {
      health: 'late',
      reason: `${missed} monitor(s) a whole interval past due${waited}: no replica's probe runner is taking them (runner stopped, or every pool full: channel_monitor.pool_size)`,
    };
  },
  async run(ctx, { monitors, monitorHistory, metrics }, _o, config) {
    const c = config.channel_monitor;
    const counts = await monitors.dueCounts(c.late_after);
    metrics.group(ProbesMetrics).due.set(counts.due);
    metrics.group(ProbesMetrics).overdue.set(counts.overdue);
    let rolled;
    try {
      rolled = await monitorHistory.rollUp(ctx.fencingToken, { trailingMs: TRAILING_MS, bootstrapMs: BOOTSTRAP_MS, maxSpanMs: MAX_SPAN_MS });
    } catch (err) {
      if (err instanceof WatermarkFenced) return { items: 0, note: err.message };
      throw err;
    }
    let pruned = 0;
    for (let n = PRUNE_BATCH; n === PRUNE_BATCH && !ctx.signal.aborted;) {
      n = await monitorHistory.prune(c.raw_retention, c.rollup_retention, PRUNE_BATCH);
      pruned += n;
    }
    return {
      items: rolled.rows + pruned,
      note: `${counts.enabled} monitors (${counts.due} due, ${counts.overdue} overdue); ${rolled.rows} minute rollups to ${rolled.upto.toISOString()}; ${pruned} old rows pruned`,
    };
  },
});

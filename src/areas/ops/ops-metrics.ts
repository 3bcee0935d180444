import { jobsFor } from '../../modules/define-job.js';
import type { OpsServices } from './wiring.js';
import type { NotificationsFace } from '../notifications/index.js';
import { bucketStart } from './catalogue.js';
import { OpsMetrics } from './metrics.js';

const defineJob = jobsFor<OpsServices & NotificationsFace>();

/**
 * ops_metrics: each round records the previous whole bucket (`ops.bucket`), cluster-wide, once
 * per slot and idempotent on the bucket. A round without traffic writes zeroes; a missing row
 * means the collector did not run. Missed buckets are not backfilled (their state counts are gone).
 */
export const opsMetricsJob = defineJob({
  name: 'ops_metrics',
  description: 'Records one row of ops series (traffic, errors, latency, accounts, jobs, outbox, dependencies) per ops.bucket',
  scope: 'cluster',
  defaults: (config) => ({ enabled: true, every: `${config.ops.bucket}ms`, timeout: `${Math.max(10_000, config.ops.bucket)}ms` }),
  needs: ['ops', 'metrics'],
  async run(ctx, { ops, metrics }, _o, config) {
    const m = metrics.group(OpsMetrics);
    const b = config.ops.bucket;
    const to = bucketStart(ctx.slot.getTime(), b);
    const from = new Date(to - b);
    const t0 = ctx.clock.now();
    const { metrics: series, instances, errors } = await ops.collector.collect(from, new Date(to));
    const written = await ops.series.write(from, b / 1000, series, instances, ctx.fencingToken);
    m.collectSeconds.observe((ctx.clock.now() - t0) / 1000);
    m.lastBucket.set(from.getTime() / 1000);
    if (typeof series.outbox_lag_seconds === 'number') m.outboxLag.set(series.outbox_lag_seconds);
    if (typeof series.notification_backlog === 'number') m.notificationBacklog.set(series.notification_backlog);
    if (typeof series.notification_rate_limited === 'number') m.notificationRateLimited.set(series.notification_rate_limited);
    if (errors.length) {
      m.collectErrors.inc(errors.length);
      ctx.log.warn({ errors }, 'ops_metrics: some series could not be read (stored as unknown)');
    }
    return { items: written ? 1 : 0, note: `bucket ${from.toISOString()}: ${series.request_count ?? '?'} requests${errors.length ? `; unknown: ${errors.join('; ')}` : ''}` };
  },
});

import { wired, type WiringContext } from '../../modules/wiring.js';
import { RoutingAccounts } from './store/routing-accounts.js';
import { SchedulerOutbox } from './store/scheduler-outbox.js';
import { RedisSnapshotBuckets } from './store/snapshot-buckets.js';
import { MemorySnapshotBuckets } from './store/memory-snapshot-buckets.js';
import { SchedulerSnapshot } from './scheduler-snapshot-service.js';
import { OutboxConsumer } from './outbox-consumer.js';
import { SchedulerMetrics } from './metrics.js';
import { WAKE_SPACING_MS } from '../../workers/wake-hub.js';

/** The scheduler snapshot's services: Redis buckets in cluster mode, memory in embedded mode. */
export function schedulerWiring(w: WiringContext) {
  const { config, db, redis, clock, metrics } = w;
  const sm = metrics.group(SchedulerMetrics);
  const log = w.log.child({ area: 'scheduler_snapshot' });
  const s = config.snapshot;
  const buckets = redis ? new RedisSnapshotBuckets(redis, { prefix: config.redis.key_prefix, env: config.instance.env }) : new MemorySnapshotBuckets(() => clock.now());
  const routing = new RoutingAccounts(db);
  const outbox = new SchedulerOutbox(db);
  const snapshot = new SchedulerSnapshot(buckets, routing, clock, sm, log, config.instance.id, s.read_max_age);
  const consumer = new OutboxConsumer(outbox, routing, snapshot, clock, sm, log, config.instance.id, {
    pollIntervalMs: s.poll_interval,
    batchSize: s.batch_size,
    claimTtlMs: s.claim_ttl,
    rules: { lagBoundSeconds: s.lag_bound / 1000, lagPolls: s.lag_polls, backlogLimit: s.backlog_limit },
    rebuildEveryMs: s.rebuild_every,
    rebuildBackoffBaseMs: s.rebuild_backoff_base,
    rebuildBackoffMaxMs: s.rebuild_backoff_max,
    rebuildChunk: s.rebuild_chunk,
    ackTimeoutMs: 5000,
    ackAttempts: 3,
    deleteBatch: 50,
    backstopMs: w.wakes?.idleMs(s.poll_interval),
    wakeSpacingMs: WAKE_SPACING_MS,
    ticks: metrics.loopTicks,
  });
  w.wakes?.on('scheduler_outbox', (why) => consumer.wake(why));
  return wired({ services: { schedulerSnapshot: snapshot, snapshotConsumer: consumer, schedulerOutbox: outbox }, rungs: [] });
}

/** What the scheduler snapshot area's job and routes use. */
export type SchedulerSnapshotServices = ReturnType<typeof schedulerWiring>['services'];

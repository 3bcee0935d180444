import { wired, type WiringContext } from '../../modules/wiring.js';
import { ChangeEvents } from './store/change-events.js';
import { RedisChangeStream } from './store/redis-change-stream.js';
import { ChangePublisher } from './change-publisher.js';
import { ChangeStreamMetrics } from './metrics.js';
import { WAKE_SPACING_MS } from '../../workers/wake-hub.js';

/**
 * The change stream's services: the outbox, its publisher (XADD to the Redis Stream in cluster
 * mode; in embedded mode it only gives published events their seq, read by `GET /changes`).
 * The publisher loop is started and stopped by the `change_stream` job (change-stream.ts).
 */
export function changeStreamWiring(w: WiringContext) {
  const { config, db, redis, clock, metrics } = w;
  const c = config.change_stream;
  const cm = metrics.group(ChangeStreamMetrics);
  const log = w.log.child({ area: 'change_stream' });
  const changeEvents = new ChangeEvents(db);
  const stream = redis ? new RedisChangeStream(redis, { prefix: config.redis.key_prefix, env: config.instance.env }, c.max_len) : null;
  const publisher = new ChangePublisher(changeEvents, async (events) => stream?.add(events), clock, cm, log, {
    pollIntervalMs: c.poll_interval,
    batchSize: c.batch_size,
    retentionMs: c.retention,
    backstopMs: w.wakes?.idleMs(c.poll_interval),
    wakeSpacingMs: WAKE_SPACING_MS,
    ticks: metrics.loopTicks,
  });
  w.wakes?.on('change_events', (why) => publisher.wake(why));
  return wired({
    services: { changeEvents, changePublisher: publisher, changeStreamKey: stream?.key ?? null },
    rungs: [],
  });
}

/** What the change-stream area's routes use. */
export type ChangeStreamServices = ReturnType<typeof changeStreamWiring>['services'];

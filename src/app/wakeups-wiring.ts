import type { Config } from '../config/load.js';
import type { Db } from '../store/db.js';
import type { Logger } from '../telemetry/logger.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { LivenessSession } from '../coordination/liveness.js';
import { WakeHub } from '../workers/wake-hub.js';
import { WakeListener } from '../coordination/wake-listener.js';

export interface Wakeups {
  hub: WakeHub;
  /** Embedded mode: starts PGlite's in-process LISTEN (cluster mode listens as the liveness session opens). */
  start(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The replica's wake-up path (issue 26): the hub loops register with, and its one listener, on the
 * liveness session in cluster mode (none without it: `crash_detection: lease` keeps loops on their
 * poll intervals) or PGlite's in-process LISTEN in embedded mode.
 */
export function wireWakeups(config: Config, db: Db, liveness: LivenessSession | null, log: Logger, metrics: Metrics): Wakeups {
  const wlog = log.child({ area: 'wakeups' });
  const hub = new WakeHub(config.wakeups.enabled, config.wakeups.backstop, (up) => metrics.wakeListenerUp.set(up ? 1 : 0));
  const listener = new WakeListener(hub, wlog, metrics.wakeups);
  if (liveness) listener.onLiveness(liveness);
  else if (config.wakeups.enabled && config.mode === 'cluster') wlog.warn('wake-ups need the liveness session (cluster.crash_detection: session): loops poll at their own intervals');
  return {
    hub,
    start: () => (config.mode === 'embedded' ? listener.onEmbedded(db) : Promise.resolve()),
    stop: () => listener.stop(),
  };
}

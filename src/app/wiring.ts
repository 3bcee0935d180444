import type { RedisClient } from '../coordination/redis-client.js';
import type { Config } from '../config/load.js';
import type { Db } from '../store/db.js';
import type { SecretBox } from '../store/secret-box.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { Logger } from '../telemetry/logger.js';
import type { Clock, Random } from '../time/clock.js';
import type { Stoppable } from './shutdown-ladder.js';
import type { InstanceInfo } from '../coordination/instance-registry.js';
import type { Liveness } from '../coordination/liveness.js';
import type { WakeHub } from '../workers/wake-hub.js';
import type { RefreshShards } from '../coordination/refresh-shards.js';
import type { Services } from '../jobs/services.js';
import type { JobView } from '../jobs/job-views.js';
import type { JobDefinition } from '../scheduler/job.js';

/** What an area may read from the running runtime, lazily (at use, never while wiring). */
export interface RuntimeView {
  jobViews(): Promise<JobView[]>;
  instances(): Promise<InstanceInfo[]>;
  readonly services: Services;
  readonly jobs: readonly JobDefinition[];
}

/** What every area's wiring gets: the connections and the runtime's shared parts. */
export interface WiringContext {
  config: Config;
  db: Db;
  redis: RedisClient | null;
  box: SecretBox;
  clock: Clock;
  random: Random;
  log: Logger;
  metrics: Metrics;
  runtime: RuntimeView;
  /** The refresh sharding over the live replicas, kept current by the heartbeat. */
  shards: RefreshShards;
  /** The crash detector (cluster mode with session crash detection): leases record its key so a survivor takes a dead replica's work over at once. */
  liveness?: Liveness | null;
  /** Wake-ups: loops register the topics whose notifications wake them, and take their idle sleep from it. */
  wakes?: WakeHub;
}

/** An area's services, and the shutdown rungs that stop them (run after the jobs' own onStop hooks). */
export interface Wired<T> {
  services: T;
  rungs: Stoppable[];
  /** Runs once after connecting, before the scheduler starts (e.g. replaying what an earlier exit spilled). */
  prepare?: () => Promise<void>;
}

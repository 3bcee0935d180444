import type { RedisClient } from '../coordination/redis-client.js';
import type { Config } from '../config/load.js';
import type { Db } from '../store/db.js';
import type { SecretBox } from '../store/secret-box.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { Logger } from '../telemetry/logger.js';
import type { Clock, Random } from '../time/clock.js';
import type { Deadline } from '../time/deadline.js';
import type { InstanceInfo } from '../coordination/instance-registry.js';
import type { Liveness } from '../coordination/liveness.js';
import type { WakeHub } from '../workers/wake-hub.js';
import type { Memberships } from '../coordination/memberships.js';
import type { JobView } from './job-views.js';
import type { JobDefinition } from '../scheduler/job.js';

export type { KernelServices } from './define-job.js';

/**
 * The phases of the shutdown ladder, in the order they run (invariant 4): stop taking work, stop
 * the rounds, stop the jobs' own services, drain the areas' services (usage flush, outbox,
 * runners), then coordination (skip summary, liveness, instance record), then connections.
 * A rung declares its phase; within a phase, rungs run in registration order (the area list's
 * order for the areas' rungs). This list is the one place the order is written; the ladder that
 * runs it is app/shutdown-ladder.ts.
 */
export const SHUTDOWN_PHASES = ['ingress', 'rounds', 'jobs', 'services', 'coordination', 'connections'] as const;
export type ShutdownPhase = (typeof SHUTDOWN_PHASES)[number];

/**
 * One rung of the shutdown ladder. `stop` gets the ladder's one deadline, `by` (made once for the
 * whole shutdown: what earlier rungs took is gone), pushed out to at least now + `minMs` for a rung
 * that must run, such as the final usage flush, even when earlier rungs used the grace up. It
 * passes `by` down unchanged. A string it returns is a warning worth logging.
 */
export interface Stoppable {
  name: string;
  /** Where in the ladder it runs (default `services`: an area's rung). */
  phase?: ShutdownPhase;
  minMs?: number;
  stop(by: Deadline): Promise<string | void> | string | void;
}

/** What an area may read from the running runtime, lazily (at use, never while wiring). */
export interface RuntimeView {
  jobViews(): Promise<JobView[]>;
  instances(): Promise<InstanceInfo[]>;
  readonly jobs: readonly JobDefinition[];
  /** Whether this process is a replica (registered, beating); false in a one-shot CLI command. */
  readonly registers: boolean;
}

/** What every area's `wire` gets: the connections and the runtime's shared parts. */
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
  /** The memberships the areas declared (`AreaModule.memberships`), each with its live members, kept current by the heartbeat. */
  memberships: Memberships;
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
  /** Runs once the instance is registered, with its boot id (e.g. refresh leases name their holder's boot). */
  registered?: (bootId: string) => void;
  /** What a forced exit (a second signal) still waits for (cli/start.ts). */
  forcedExit?: ForcedExitSaver;
}

/**
 * Work only this process can still store when a forced exit cuts the shutdown ladder short (token
 * refresh: replies to calls already sent, which may carry a rotated refresh token). The exit waits
 * for every saver with something pending, bounded; the saver logs what it saved or lost.
 */
export interface ForcedExitSaver {
  pending(): boolean;
  /** Waits up to `boundMs` for the pending work to be stored, logging what was and what was not. */
  save(boundMs: number): Promise<void>;
  /** No wait (a third signal): logs what is lost. */
  abandon(): void;
}

/** Types an area's `wire` result without writing its services' type twice: it is inferred from the object. */
export function wired<T extends object>(w: Wired<T>): Wired<T> {
  return w;
}

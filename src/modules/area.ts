import type { FastifyInstance } from 'fastify';
import type { Command } from 'commander';
import type { Config } from '../config/load.js';
import type { ConfigSectionSchemas, ConfigSectionsOf } from '../config/schema.js';
import type { Db } from '../store/db.js';
import type { Migration } from '../store/migrations/index.js';
import type { Logger } from '../telemetry/logger.js';
import type { MetricGroup, Metrics } from '../telemetry/metrics.js';
import type { Clock } from '../time/clock.js';
import type { AnyJobModule } from './define-job.js';
import type { InstanceInfo } from '../coordination/instance-registry.js';
import type { RunRecords } from '../coordination/run-records.js';
import type { RoundReport } from '../scheduler/round-runner.js';
import type { JobDefinition } from '../scheduler/job.js';
import type { JobPauseControl, JobView } from './job-views.js';
import type { KernelServices, WiringContext, Wired } from './wiring.js';
import type { MembershipSpec } from '../coordination/memberships.js';

/** What the HTTP layer checks a session token with (the admin area's sessions answer it). */
export interface SessionCheck {
  verify(token: string, adminToken: string | undefined): Promise<boolean>;
}

/**
 * What an HTTP route may use of the running process: the narrow face the runtime shows to routes
 * (never the `Runtime` class). Each route module takes a `Pick` of it naming what it uses; `S` is
 * the services its area sees (its own `wire` result, and what it uses of other areas' faces).
 */
export interface RouteDeps<S = KernelServices> {
  readonly config: Config;
  readonly log: Logger;
  readonly clock: Clock;
  readonly db: Db;
  readonly metrics: Metrics;
  readonly services: S;
  readonly sessions: SessionCheck;
  readonly records: RunRecords;
  readonly jobs: readonly JobDefinition[];
  readonly adminToken: string | undefined;
  readonly isShuttingDown: boolean;
  jobViews(): Promise<JobView[]>;
  instances(): Promise<InstanceInfo[]>;
  /** `force`: past a pause (issue 49). */
  runNow(name: string, onStart?: (r: { runId: number; token: number }) => void, opts?: { force?: boolean }): Promise<RoundReport>;
  /** Pause and resume of a job, cluster-wide (issue 49). */
  readonly pauses: JobPauseControl;
  /** A round of the job as soon as one can run, asking again while one runs (for work just queued for it). */
  requestRound(name: string): void;
}

/** A wire function: the area's services from the context and the faces of the areas listed before it. */
export type WireFn<S extends object, D extends object> = (w: WiringContext, deps: D & KernelServices) => Wired<S>;

/**
 * One CLI command of an area. `register` adds the command (name, description, options) to the
 * program; its action imports the code it runs (`await import('../jobs/cli-backup.js')`), so
 * `relay-jobs <command>` loads only what that command needs. `config` loads and checks the
 * configuration the global `--config` names.
 */
export interface AreaCommand {
  name: string;
  register(program: Command, cli: CliContext): void;
}

/** A one-shot runtime a CLI command opens (no instance row, no heartbeat; warnings to stderr). */
export interface CliRuntime<S> {
  readonly services: S;
  readonly clock: Clock;
  jobViews(): Promise<JobView[]>;
  instances(): Promise<InstanceInfo[]>;
  shutdown(reason: string): Promise<void>;
}

/** What the CLI gives an area's commands: the configuration the global `--config` names, and a runtime on it. */
export interface CliContext {
  config(cmd: Command): Promise<Config>;
  runtime<S>(config: Config): Promise<CliRuntime<S>>;
}

/**
 * One capability, as the composition seam sees it: each area exports one of these (`defineArea`)
 * from its `area.ts`, and the area list (app/registry.ts) is the only file that names them.
 * `S` is the services its `wire` returns (inferred); `D` what it uses of the areas wired before it,
 * typed by the faces those areas export from their index.ts; `C` its config sections (from its config.ts).
 */
export interface AreaModule<S extends object = object, D extends object = object, C extends ConfigSectionSchemas = ConfigSectionSchemas> {
  name: string;
  /**
   * Its config sections (top-level keys of the config file and their schemas, from its config.ts),
   * composed after the kernel's in area-list order (app/config-schema.ts). Its config.ts also adds
   * them to `Config` by declaration merging (config/schema.ts, `AreaConfigSections`).
   */
  config?: C;
  /**
   * Loads its wire function (a dynamic import: `relay-jobs config check` or `--help` never loads
   * an area's clients). The runtime calls the wire functions in area-list order.
   */
  wiring?: () => Promise<WireFn<S, D>>;
  /** Its jobs, in the order `relay-jobs jobs` lists them. */
  jobs: readonly AnyJobModule[];
  /**
   * Its migrations (its tables), e.g. `[{ version: 29, name: 'my_table', sql }]` from its
   * `store/migrations/` folder (SQL stays in an area's store/): joined with the kernel's and every other area's (app/migrations.ts) and
   * applied in version order; a version must be unused by any other migration.
   */
  migrations?: readonly Migration[];
  /** Its metric groups (its metrics.ts): made on the runtime's registry at wiring, so /metrics lists them from the start. */
  metrics?: readonly MetricGroup[];
  /** Its routes under `/api/v1` (behind the admin token or session). */
  routes?(api: FastifyInstance, deps: RouteDeps<S & D & KernelServices>): void;
  /** Routes outside `/api/v1` that authenticate themselves (the payment webhook's signature). */
  publicRoutes?(app: FastifyInstance, deps: RouteDeps<S & D & KernelServices>): void;
  /** Cross-key config rules of the area's own sections; each problem names its key (reported with every other config problem). */
  checkConfig?(config: Config): string[];
  /** Its config sections' warnings: values that load but are probably not what was meant (added to `Config.warnings`, after the kernel's). */
  configWarnings?(config: Config): string[];
  /**
   * The named groups of live replicas it shares work over (coordination/memberships.ts): a replica
   * is a member while `job` (one of its jobs) is enabled there; its `wire` reads the live list from
   * `WiringContext.memberships.get(name)`. A name is declared by one area only.
   */
  memberships?: readonly MembershipSpec[];
  /** Its CLI commands (see AreaCommand: their code loads when the command runs). */
  cli?: readonly AreaCommand[];
}

/** Declares an area; `S` and `D` are inferred from its wire function, `C` from its config sections. */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- an area without config sections has none
export function defineArea<S extends object = object, D extends object = object, C extends ConfigSectionSchemas = {}>(area: AreaModule<S, D, C>): AreaModule<S, D, C> {
  return area;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a list of areas with different services
export type AnyArea = AreaModule<any, any, any>;

/** The services an area's wire returns. */
export type ServicesOf<A> = A extends AreaModule<infer S, infer _D> ? S : never;

type UnionToIntersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;

/** The parsed config sections an area declares. */
export type ConfigOf<A> = A extends AreaModule<infer _S, infer _D, infer C> ? ConfigSectionsOf<C> : never;

/** Every listed area's parsed config sections, as one intersection. */
export type ConfigOfAreas<L extends readonly AnyArea[]> = UnionToIntersection<ConfigOf<L[number]>>;

/** The runtime's combined services: the kernel's and every listed area's, as one intersection. */
export type ServicesOfAreas<L extends readonly AnyArea[]> = KernelServices & UnionToIntersection<ServicesOf<L[number]>>;

import type { FastifyInstance } from 'fastify';
import type { Config } from '../config/load.js';
import type { Db } from '../store/db.js';
import type { Logger } from '../telemetry/logger.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { Clock } from '../time/clock.js';
import type { AnyJobModule } from './define-job.js';
import type { Services } from './services.js';
import type { InstanceInfo } from '../coordination/instance-registry.js';
import type { RunRecords } from '../coordination/run-records.js';
import type { RoundReport } from '../scheduler/round-runner.js';
import type { JobDefinition } from '../scheduler/job.js';
import type { JobView } from './job-views.js';

/**
 * What an HTTP route may use of the running process: the narrow face the runtime shows to routes
 * (never the `Runtime` class). Each route module takes a `Pick` of it naming what it uses.
 */
export interface RouteDeps {
  readonly config: Config;
  readonly log: Logger;
  readonly clock: Clock;
  readonly db: Db;
  readonly metrics: Metrics;
  readonly services: Services;
  readonly sessions: Services['sessions'];
  readonly records: RunRecords;
  readonly jobs: readonly JobDefinition[];
  readonly adminToken: string | undefined;
  readonly isShuttingDown: boolean;
  jobViews(): Promise<JobView[]>;
  instances(): Promise<InstanceInfo[]>;
  runNow(name: string, onStart?: (r: { runId: number; token: number }) => void): Promise<RoundReport>;
}

/**
 * One capability, as the composition seam sees it: each area exports one of these from its
 * `index.ts`, and the area list (jobs/registry.ts) is the only file that names them.
 */
export interface AreaModule {
  name: string;
  /** Its jobs, in the order `relay-jobs jobs` lists them. */
  jobs: readonly AnyJobModule[];
  /** Its routes under `/api/v1` (behind the admin token or session). */
  routes?(api: FastifyInstance, deps: RouteDeps): void;
  /** Routes outside `/api/v1` that authenticate themselves (the payment webhook's signature). */
  publicRoutes?(app: FastifyInstance, deps: RouteDeps): void;
}

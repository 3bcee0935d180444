import type { Config } from '../config/load.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time/clock.js';
import type { Logger } from '../telemetry/logger.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { JobDefinition } from '../scheduler/job.js';
import { ClusterSchedules } from '../coordination/cluster-schedules.js';
import { ScheduleBook } from '../scheduler/schedule-book.js';

/**
 * This replica's schedule book (issue 49, "one schedule per job"): it checks every heartbeat
 * interval (a replica is live for three of them), feeds `relay_jobs_config_drift`, and in embedded
 * mode (one process: the data directory's lock) adopts its own schedules unconditionally.
 */
export function buildScheduleBook(config: Config, db: Db, jobs: readonly JobDefinition[], clock: Clock, log: Logger, metrics: Metrics): ScheduleBook {
  const beat = config.cluster.instance_heartbeat;
  return new ScheduleBook({
    store: new ClusterSchedules(db, config.instance.id, beat * 3),
    jobs,
    clock,
    log,
    pollMs: beat,
    adoptOwn: config.mode === 'embedded',
    offSchedule: (job, replicas) => metrics.configDrift.set({ job }, replicas),
    ticks: metrics.loopTicks,
  });
}

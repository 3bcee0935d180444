import type { Db } from '../store/db.js';
import { instanceAliveSql } from './instance-alive.js';
import type { InstanceInfo } from './instance-registry.js';

/** How long a replica that stopped beating without a clean shutdown is named as dead: then `ops_cleanup` deletes its row (below). */
export const DEAD_REPLICA_HORIZON_MS = 7 * 86_400_000;

/**
 * Replicas that stopped beating without a clean shutdown (no `stopped_at`: SIGKILL, OOM, a lost
 * host) within the horizon, newest first. A clean stop, a return under the same id, or the horizon
 * ends it. The doctor's `dead_replicas` check and the `relay_jobs_replicas_dead` gauge share it.
 */
export function deadReplicas(instances: readonly InstanceInfo[], nowMs: number, horizonMs = DEAD_REPLICA_HORIZON_MS): InstanceInfo[] {
  return instances
    .filter((i) => !i.alive && i.stopped_at === null && i.mode === 'cluster' && nowMs - i.heartbeat_at.getTime() <= horizonMs)
    .sort((a, b) => b.heartbeat_at.getTime() - a.heartbeat_at.getTime());
}

// $1 horizon ms, $2 batch. A replica silent for the horizon is no longer named anywhere (the doctor's
// dead_replicas, relay_jobs_replicas_dead, the schedule votes); its row goes. One still holding its
// liveness key (a process frozen that long, SIGSTOP) is alive by the one test and stays: deleting it
// would hand its leases over while it can still wake and write.
// The outer WHERE repeats the test: a beat or a new registration that commits while the DELETE waits
// for the row's lock is re-checked on the row's new version (READ COMMITTED), so a row that just came
// back to life is not deleted.
const GONE = `heartbeat_at < clock_timestamp() - make_interval(secs => $1::double precision / 1000) AND NOT ${instanceAliveSql('instances', '$1')}`;
const PRUNE = `
DELETE FROM instances WHERE instance_id IN (SELECT instance_id FROM instances WHERE ${GONE} ORDER BY heartbeat_at LIMIT $2)
   AND ${GONE}`;

/**
 * The `instances` rows of replicas gone for good. Instance ids change with every deploy under
 * generated names (a Kubernetes pod's), so without this the table grows by every replica that
 * ever ran, and every view of the replicas reads them all. Pruned by `ops_cleanup`, the one
 * retention round, past the doctor's dead-replica horizon (7 days), whether the replica stopped
 * cleanly or not: by then nothing names it. A replica that comes back under a pruned id registers
 * anew: at its start, or, still running, at its next beat (`InstanceRegistry.beat`). Nothing
 * refers to a row: `job_runs` keep the instance id as text, and a lease whose holder has no row is
 * free (`holderDeadSql`), as it was once the holder's beat went stale.
 */
export class InstanceRetention {
  constructor(private readonly db: Db) {}

  /** Up to `batch` rows silent for `horizonMs` (default: the dead-replica horizon), oldest first; returns rows deleted. */
  async prune(batch: number, horizonMs = DEAD_REPLICA_HORIZON_MS): Promise<number> {
    return (await this.db.query(PRUNE, [horizonMs, batch])).rowCount;
  }
}

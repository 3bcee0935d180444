import type { Db } from '../store/db.js';
import { instanceAliveSql } from './instance-alive.js';
import { DEAD_REPLICA_HORIZON_MS } from './instance-registry.js';

// $1 horizon ms, $2 batch. A replica silent for the horizon is no longer named anywhere (the doctor's
// dead_replicas, relay_jobs_replicas_dead, the schedule votes); its row goes. One still holding its
// liveness key (a process frozen that long, SIGSTOP) is alive by the one test and stays: deleting it
// would hand its leases over while it can still wake and write.
const PRUNE = `
DELETE FROM instances WHERE instance_id IN (
  SELECT instance_id FROM instances
   WHERE heartbeat_at < clock_timestamp() - make_interval(secs => $1::double precision / 1000)
     AND NOT ${instanceAliveSql('instances', '$1')}
   ORDER BY heartbeat_at LIMIT $2)`;

/**
 * The `instances` rows of replicas gone for good. Instance ids change with every deploy under
 * generated names (a Kubernetes pod's), so without this the table grows by every replica that
 * ever ran, and every view of the replicas reads them all. Pruned by `ops_cleanup`, the one
 * retention round, past the doctor's dead-replica horizon (7 days), whether the replica stopped
 * cleanly or not: by then nothing names it. A replica that comes back under a pruned id registers
 * anew. Nothing refers to a row: `job_runs` keep the instance id as text, and a lease whose
 * holder has no row is free (`holderDeadSql`), as it was once the holder's beat went stale.
 */
export class InstanceRetention {
  constructor(private readonly db: Db) {}

  /** Up to `batch` rows silent for `horizonMs` (default: the dead-replica horizon), oldest first; returns rows deleted. */
  async prune(batch: number, horizonMs = DEAD_REPLICA_HORIZON_MS): Promise<number> {
    return (await this.db.query(PRUNE, [horizonMs, batch])).rowCount;
  }
}

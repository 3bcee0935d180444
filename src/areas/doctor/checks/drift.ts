import { ClusterSchedules } from '../../../coordination/cluster-schedules.js';
import { describeDifferences, differingKeys } from '../../../coordination/schedule-fingerprint.js';
import { ok, warn, type DoctorCheck } from '../check.js';

/**
 * One schedule per job (issue 49): every live replica publishes the fingerprint of each job's
 * schedule (cadence or cron, time zone, offset, enabled, timeout, lock TTL) and the cluster runs the
 * adopted one (docs/coordination.md "One schedule per job"). A live replica whose schedule of a
 * cluster-scoped job differs is named with the job and the differing keys: it runs no scheduled
 * round of it (its health reads `config_drift`), so its config file or environment is not what the
 * operator thinks. Instance-scoped jobs run each replica's own rounds (a worker enabled on some
 * replicas only is a deployment choice), so they are not compared. Read from the database, so `relay-jobs doctor` outside the replicas sees it too;
 * `warn`, not `fail`: the cluster still runs each job once per slot, on the adopted schedule.
 */
export const configDrift: DoctorCheck = {
  name: 'config_drift',
  group: 'backends',
  modes: ['cluster'],
  async run({ db, instances, jobs }) {
    const [adopted, published] = await Promise.all([ClusterSchedules.adopted(db), ClusterSchedules.published(db)]);
    const live = new Set(instances.filter((i) => i.alive).map((i) => i.instance_id));
    const scope = new Map(jobs.map((j) => [j.name, j.scope]));
    const findings: string[] = [];
    for (const a of adopted.values()) {
      if (scope.get(a.job) === 'instance') continue; // each replica's own rounds: no cluster schedule to be off
      const off = published.filter((p) => p.job === a.job && live.has(p.instanceId) && p.fingerprint !== a.fingerprint);
      if (!off.length) continue;
      const each = off.map((p) => `replica ${p.instanceId}: ${describeDifferences(differingKeys(p.spec, a.spec), `on ${p.instanceId}`)}`);
      findings.push(`job ${a.job} (not run there): ${each.join('; ')}`);
    }
    const fix =
      'give every replica the same jobs.<name> settings (config file and RELAY_JOBS__JOBS__<NAME>__* environment) and restart the odd ones; during a rolling deploy this ends by itself once the last old replica is gone';
    if (!findings.length) return ok(`${adopted.size} job(s) on one schedule across ${live.size} live replica(s)`, fix);
    return warn(`${findings.length} job(s) whose schedule differs between live replicas: ${findings.join(' | ')}`, fix);
  },
};

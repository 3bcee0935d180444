import { formatDuration } from '../../../config/duration.js';
import { deadReplicas } from '../../../coordination/instance-retention.js';
import { fail, ok, type DoctorCheck } from '../check.js';

/**
 * A replica that stopped beating without a clean shutdown (SIGKILL, OOM, a lost host): its share
 * of the work was taken over, but the capacity is gone and nobody said so. Named until it beats
 * again under its id, is stopped cleanly, or a week passes (its row then counts as pruned). Read
 * from the instances table, so `relay-jobs doctor` outside the replicas sees it too.
 */
export const deadReplicasCheck: DoctorCheck = {
  name: 'dead_replicas',
  group: 'backends',
  modes: ['cluster'],
  async run({ instances, nowMs }) {
    const dead = deadReplicas(instances, nowMs);
    const fix = 'restart the replica (same RELAY_JOBS_INSTANCE_ID), or if it is gone for good, nothing: it is no longer named a week after its last beat';
    if (!dead.length) return ok(`${instances.filter((i) => i.alive).length} replica(s) beating; none stopped without a clean shutdown in the last 7 days`, fix);
    const age = (ms: number) => formatDuration(Math.max(1000, Math.round(ms / 1000) * 1000));
    return fail(
      `${dead.length} replica(s) stopped beating without a clean shutdown: ${dead
        .slice(0, 5)
        .map((i) => `${i.instance_id} (host ${i.hostname}, pid ${i.pid}, last beat ${age(nowMs - i.heartbeat_at.getTime())} ago)`)
        .join(', ')}${dead.length > 5 ? ', …' : ''}`,
      fix,
    );
  },
};

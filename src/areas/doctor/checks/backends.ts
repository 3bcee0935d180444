import type { BackendIdentity } from '../../../coordination/backend-identity.js';
import { markerFix, markerMismatch, readDatabaseMarker, sameDatabase } from '../../../coordination/database-marker.js';
import { combine, fail, ok, otherLiveReplicas, warn, type CheckOutcome, type DoctorCheck } from '../check.js';

const db = (b: BackendIdentity['database']) => (b ? `database ${b.name} (system ${b.system_identifier ?? '?'})` : 'no database identity');
const redis = (b: BackendIdentity['redis']) => (b ? `Redis run_id ${b.run_id.slice(0, 12)} (${b.role})` : 'no Redis identity');

/**
 * Same backends: every live replica reports, through its heartbeat, the Redis `run_id` and the
 * database `system_identifier` + name it talks to; one on another Redis or database diverges
 * silently (quota counters, locks and the scheduler snapshot split in two), so it is `fail`, named;
 * so is one of this environment on another `redis.key_prefix` (another key space on the same Redis).
 * The database marker in Redis (coordination/database-marker.ts) names the database the Redis key
 * space belongs to: one that names another database than this process's is `fail`, naming both
 * (a replica of the other database shares this Redis, prefix and environment, even when it is not
 * registered in this database and so shows in no heartbeat here).
 */
export const sameBackends: DoctorCheck = {
  name: 'same_backends',
  group: 'backends',
  modes: ['cluster'],
  async run(ctx) {
    const { self, replica } = ctx;
    const live = otherLiveReplicas(ctx);
    const findings: CheckOutcome[] = [];
    const fixDb = "point every replica's DATABASE_URL at the same database (or stop the stray replica)";
    const fixRedis = "point every replica's REDIS_URL at the same Redis (or stop the stray replica)";
    const ks = { prefix: ctx.config.redis.key_prefix, env: ctx.config.instance.env };
    const marker = ctx.redis && self.database ? await readDatabaseMarker(ctx.redis, ks) : null;
    if (marker && self.database && !sameDatabase(self.database, marker)) findings.push(fail(markerMismatch(ks, self.database, marker), markerFix(ks)));
    if (self.redis && self.redis.role !== 'master')
      findings.push(fail(`this replica's Redis is a ${self.redis.role}, not a master`, 'point REDIS_URL at the master (or use redis+sentinel:// so failovers are followed)'));
    for (const i of live) {
      const b = i.backends;
      if (!b) {
        findings.push(warn(`replica ${i.instance_id} reports no backends (older version, or not beaten since the upgrade)`, 'upgrade every replica to this version so the doctor can compare them'));
        continue;
      }
      const sameDb = b.database && self.database && b.database.name === self.database.name && (b.database.system_identifier ?? '') === (self.database.system_identifier ?? '');
      if (!sameDb) findings.push(fail(`replica ${i.instance_id} is on ${db(b.database)}, this one on ${db(self.database)}`, fixDb));
      if (!b.redis) findings.push(warn(`replica ${i.instance_id} could not read its Redis identity (Redis down there?)`, `look at replica ${i.instance_id}'s /readyz and REDIS_URL`));
      else if (self.redis && b.redis.run_id !== self.redis.run_id) findings.push(fail(`replica ${i.instance_id} is on ${redis(b.redis)}, this one on ${redis(self.redis)}`, fixRedis));
      else if (b.redis.role !== 'master') findings.push(fail(`replica ${i.instance_id}'s Redis is a ${b.redis.role}, not a master`, `point replica ${i.instance_id}'s REDIS_URL at the master`));
      if (i.env === ctx.config.instance.env && b.key_prefix !== null && self.key_prefix !== null && b.key_prefix !== self.key_prefix)
        findings.push(
          fail(
            `replica ${i.instance_id} uses redis.key_prefix ${JSON.stringify(b.key_prefix)}, this one ${JSON.stringify(self.key_prefix)}: their quota counters, locks and snapshots are apart`,
            'give every replica of the cluster the same redis.key_prefix (RELAY_JOBS__REDIS__KEY_PREFIX)',
          ),
        );
    }
    const marked = marker ? `, marked as this Redis key space's database` : ctx.redis ? ' (no database marker in Redis yet: the next replica start or heartbeat minute sets it)' : '';
    return combine(findings, ok(`${live.length + (replica ? 1 : 0)} live replica(s) on ${db(self.database)}${marked} and ${redis(self.redis)}`, fixRedis));
  },
};

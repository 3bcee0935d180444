import { combine, fail, ok, warn, type CheckOutcome, type DoctorCheck } from '../check.js';

/** How many keys of the prefix, and SCAN calls, to spend looking for other environments: a sample, not a full scan. */
const SCAN_LIMIT = 10_000;
const SCAN_CALLS = 200;

/**
 * Environment isolation: every Redis key is `<redis.key_prefix>:<RELAY_JOBS_ENV>:…`, so locks of
 * two environments never collide; but job_state, job_runs and slot claims are per database, so a
 * live replica of another environment in this database shares the slots (`fail`, unless
 * `cluster.allow_mixed_env`), and keys of another environment in this Redis mean staging and
 * production share a Redis (memory, eviction, restarts: `warn`).
 */
export const envIsolation: DoctorCheck = {
  name: 'env_isolation',
  group: 'environment',
  modes: ['cluster'],
  async run({ config, instances, redis }) {
    const env = config.instance.env;
    const prefix = config.redis.key_prefix;
    const findings: CheckOutcome[] = [];
    const others = instances.filter((i) => i.alive && i.env !== env);
    if (others.length) {
      const list = others.map((i) => `${i.instance_id} (${i.env})`).join(', ');
      if (config.cluster.allow_mixed_env)
        findings.push(warn(`live replicas of another environment share this database: ${list} (cluster.allow_mixed_env is true)`, 'give each environment its own database and Redis'));
      else
        findings.push(
          fail(
            `live replicas of another environment share this database and its job slots: ${list}`,
            "give each environment its own DATABASE_URL (and REDIS_URL), or stop the other environment's replicas",
          ),
        );
    }
    const envs = new Set<string>();
    if (redis) {
      let cursor = '0';
      let seen = 0;
      let calls = 0;
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
        cursor = next;
        seen += keys.length;
        for (const k of keys) envs.add(k.slice(prefix.length + 1).split(':')[0]!);
      } while (cursor !== '0' && seen < SCAN_LIMIT && ++calls < SCAN_CALLS);
      envs.delete(env);
      if (envs.size)
        findings.push(
          warn(
            `Redis also holds keys of environment(s) ${[...envs].join(', ')} under ${prefix}: (locks stay apart; memory, eviction and restarts are shared)`,
            'give each environment its own Redis (REDIS_URL), or at least its own redis.key_prefix',
          ),
        );
    }
    return combine(
      findings,
      ok(`environment ${env}, lock keys under ${prefix}:${env}:; no other environment on these backends`, 'keep RELAY_JOBS_ENV distinct per environment and their backends apart'),
    );
  },
};

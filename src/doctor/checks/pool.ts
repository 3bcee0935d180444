import { connectionBudget } from '../../store/server-checks.js';
import { busiestSecond, loopConnections } from './pool-math.js';
import { fail, ok, warn, type DoctorCheck } from '../check.js';

const hhmmss = (t: number) => new Date(t).toISOString().slice(11, 19);

/**
 * Pool budget of this replica: at its busiest second every cluster round that starts pins a
 * connection for the PostgreSQL fallback lock while Redis is down, beside the liveness session;
 * its own statements, the instance rounds and the loops need more. `fail` when the pinned ones
 * alone fill the pool (the rounds then wait for a connection until they time out), `warn` when
 * everything together exceeds it.
 */
export const poolBudget: DoctorCheck = {
  name: 'pool_budget',
  group: 'pool',
  modes: ['cluster'],
  async run({ jobs, config, nowMs }) {
    const pool = config.database.pool_size;
    const busy = busiestSecond(jobs, nowMs);
    const liveness = config.cluster.crash_detection === 'session' ? 1 : 0;
    const pinned = busy.cluster.length + liveness;
    const loops = loopConnections(jobs, config);
    const need = pinned + busy.cluster.length + busy.instance.length + loops.reduce((n, [, c]) => n + c, 0);
    const measured =
      `busiest second ${hhmmss(busy.at)} UTC: ${busy.cluster.length} cluster round(s) (${busy.cluster.join(', ') || 'none'}) and ${busy.instance.length} instance round(s) start together; ` +
      `pinned during a Redis outage ${pinned} (fallback locks${liveness ? ' + liveness session' : ''}), with their statements and loops (${loops.map(([n, c]) => `${n} ${c}`).join(', ')}) ${need}, database.pool_size ${pool}`;
    const fix = `raise database.pool_size to at least ${need} (and max_connections with it), or spread the jobs' slots (jobs.<name>.every / cron / jitter)`;
    if (pinned >= pool) return fail(measured, fix);
    if (need > pool) return warn(measured, fix);
    return ok(measured, fix);
  },
};

/** The pools of every live replica together against the server's `max_connections` less `superuser_reserved_connections`. */
export const connectionBudgetCheck: DoctorCheck = {
  name: 'connection_budget',
  group: 'pool',
  modes: ['cluster'],
  async run({ db, instances, config }) {
    const budget = await connectionBudget(db);
    const live = instances.filter((i) => i.alive || i.instance_id === config.instance.id);
    const own = live.some((i) => i.instance_id === config.instance.id) ? 0 : config.database.pool_size;
    // A replica's pool, its liveness session and a backup's pg_dump: the pool plus two.
    const sum = own + live.reduce((n, i) => n + (i.backends?.pool_size ?? config.database.pool_size) + 2, 0) + (own ? 2 : 0);
    const count = live.length + (own ? 1 : 0);
    const measured = `${count} live replica(s) can open ${sum} connections (pools + liveness session + backup), the server allows ${budget} (max_connections − superuser_reserved_connections)`;
    const fix = `lower database.pool_size on the replicas or raise max_connections on the server (${sum} needed), or put PgBouncer in front (DATABASE_DIRECT_URL for direct sessions)`;
    if (sum > budget) return fail(measured, fix);
    if (sum > 0.9 * budget) return warn(measured, fix);
    return ok(measured, fix);
  },
};

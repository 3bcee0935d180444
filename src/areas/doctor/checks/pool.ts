import { connectionBudget } from '../../../store/server-checks.js';
import { busiestSecond, loopConnections } from './pool-math.js';
import { fail, ok, warn, type DoctorCheck } from '../check.js';

const hhmmss = (t: number) => new Date(t).toISOString().slice(11, 19);

/**
 * Pool budget of this replica at its busiest second: every round that starts then runs its own
 * statements, beside the long-lived loops. The PostgreSQL fallback locks of a Redis outage no
 * longer take pool connections: they share the replica's one coordination session (the liveness
 * session), which is itself a pool connection unless DATABASE_DIRECT_URL gives it a pool of its
 * own. `fail` when the rounds starting together alone fill the pool (they would wait for a
 * connection until they time out), `warn` when everything together exceeds it.
 */
export const poolBudget: DoctorCheck = {
  name: 'pool_budget',
  group: 'pool',
  modes: ['cluster'],
  async run({ jobs, config, nowMs }) {
    const pool = config.database.pool_size;
    const busy = busiestSecond(jobs, nowMs);
    const session = !config.database.direct_url ? 1 : 0;
    const rounds = busy.cluster.length + busy.instance.length;
    const loops = loopConnections(jobs, config);
    const need = session + rounds + loops.reduce((n, [, c]) => n + c, 0);
    const measured =
      `busiest second ${hhmmss(busy.at)} UTC: ${busy.cluster.length} cluster round(s) (${busy.cluster.join(', ') || 'none'}) and ${busy.instance.length} instance round(s) start in it; ` +
      `with the coordination session${session ? '' : ' (on DATABASE_DIRECT_URL, not counted)'} and the loops (${loops.map(([n, c]) => `${n} ${c}`).join(', ')}) ${need} connection(s), database.pool_size ${pool}`;
    const fix = `raise database.pool_size to at least ${need} (and max_connections with it), or spread the jobs' slots (jobs.<name>.offset / every / cron)`;
    if (session + rounds >= pool) return fail(measured, fix);
    if (need > pool) return warn(measured, fix);
    return ok(measured, fix);
  },
};

/** The pools of every live replica together against the server's `max_connections` less `superuser_reserved_connections`. */
export const connectionBudgetCheck: DoctorCheck = {
  name: 'connection_budget',
  group: 'pool',
  modes: ['cluster'],
  async run({ db, instances, config, replica }) {
    const budget = await connectionBudget(db);
    const live = instances.filter((i) => i.alive || (replica && i.instance_id === config.instance.id));
    // A replica not (yet) among them counts with its own pool; a one-shot command is no replica.
    const own = replica && !live.some((i) => i.instance_id === config.instance.id) ? config.database.pool_size : 0;
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

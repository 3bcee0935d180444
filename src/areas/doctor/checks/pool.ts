import { connectionBudget, connectionsByApplication } from '../../../store/server-checks.js';
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

/**
 * The pools of every live replica together, plus every other client connection open on the server
 * now (the gateway's pool, consoles, other databases' services: `pg_stat_activity` grouped by
 * `application_name`), against the server's `max_connections` less `superuser_reserved_connections`.
 * This cluster's replicas are counted by what their pools can open (they name their connections
 * `relay-jobs/<instance id>`), everything else as it stands; this process's own connections not at all.
 */
export const connectionBudgetCheck: DoctorCheck = {
  name: 'connection_budget',
  group: 'pool',
  modes: ['cluster'],
  async run({ db, instances, config, replica }) {
    const [budget, open] = await Promise.all([connectionBudget(db), connectionsByApplication(db)]);
    const live = instances.filter((i) => i.alive || (replica && i.instance_id === config.instance.id));
    // A replica not (yet) among them counts with its own pool; a one-shot command is no replica.
    const own = replica && !live.some((i) => i.instance_id === config.instance.id) ? config.database.pool_size : 0;
    // A replica's pool, its liveness session and a backup's pg_dump: the pool plus two.
    const sum = own + live.reduce((n, i) => n + (i.backends?.pool_size ?? config.database.pool_size) + 2, 0) + (own ? 2 : 0);
    const count = live.length + (own ? 1 : 0);
    const others = otherConnections(open, new Set([...live.map((i) => i.instance_id), config.instance.id]), config.instance.id);
    const otherSum = others.reduce((n, [, c]) => n + c, 0);
    const need = sum + otherSum;
    const groups = others.length ? others.map(([app, c]) => `${app} ${c}`).join(', ') : 'none';
    const measured =
      `${count} live replica(s) can open ${sum} connections (pools + liveness session + backup), the server allows ${budget} (max_connections − superuser_reserved_connections); ` +
      `other client connections open now by application_name: ${groups}; together ${need} of ${budget}`;
    const biggest = others[0] ? `, shrink ${others[0][0]}'s pool (${others[0][1]} open)` : '';
    const fix = `lower database.pool_size on the replicas${biggest} or raise max_connections on the server (${need} needed), or put PgBouncer in front (DATABASE_DIRECT_URL for direct sessions)`;
    if (need > budget) return fail(measured, fix);
    if (need > 0.9 * budget) return warn(measured, fix);
    return ok(measured, fix);
  },
};

/**
 * The connections that are not this cluster's replicas' (theirs are counted by their pools) nor
 * this process's own, by application name, most first. A replica's are `relay-jobs/<instance id>`
 * on this database; the same name on another database is another cluster's, counted.
 */
function otherConnections(open: Array<{ application: string; this_database: boolean; n: number }>, replicas: Set<string>, self: string): Array<[string, number]> {
  const by = new Map<string, number>();
  for (const { application, this_database, n } of open) {
    if (application === `relay-jobs/${self}`) continue;
    if (this_database && application.startsWith('relay-jobs/') && replicas.has(application.slice('relay-jobs/'.length))) continue;
    by.set(application, (by.get(application) ?? 0) + n);
  }
  return [...by].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}

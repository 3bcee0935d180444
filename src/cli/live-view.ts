import type { Config } from '../config/load.js';
import { table } from './table.js';
import { UserError } from '../config/errors.js';
import type { JobView } from '../app/runtime.js';
import { readEmbeddedAdminToken } from '../app/admin-token.js';
import type { InstanceInfo } from '../coordination/instance-registry.js';
import { DataDirLock } from '../store/data-dir-lock.js';
import { oneShotRuntime } from './cli-context.js';

/** What `relay-jobs jobs` and `relay-jobs status` show: the same objects as GET /api/v1/jobs and /instances. */
export interface LiveView {
  jobs: JobView[];
  instances: InstanceInfo[];
}

/**
 * Reads the cluster's live state. In embedded mode with a running service, the service owns the
 * database, so its admin API is asked; otherwise a one-shot runtime (no instance row, no
 * heartbeat) reads the database directly and is shut down at once.
 */
export async function readLiveView(config: Config): Promise<LiveView> {
  if (config.mode === 'embedded') {
    const owner = DataDirLock.liveOwner(config.database.data_dir);
    if (owner) return viaService(config, owner.http_port ?? config.http.port);
  }
  const rt = await oneShotRuntime(config);
  try {
    return JSON.parse(JSON.stringify({ jobs: await rt.jobViews(), instances: await rt.instances() })) as LiveView;
  } finally {
    await rt.shutdown('one-shot read finished');
  }
}

async function viaService(config: Config, port: number): Promise<LiveView> {
  const token = config.http.admin_token ?? readEmbeddedAdminToken(config.database.data_dir);
  if (!token) throw new UserError(`a relay-jobs service owns ${config.database.data_dir} but no admin token is available (set RELAY_JOBS_ADMIN_TOKEN)`);
  const get = async <T>(path: string): Promise<T> => {
    let res: Response;
    try {
      res = await fetch(`http://127.0.0.1:${port}/api/v1/${path}`, { headers: { authorization: `Bearer ${token}` } });
    } catch (err) {
      throw new UserError(`a relay-jobs service owns ${config.database.data_dir} but its API at 127.0.0.1:${port} did not answer: ${(err as Error).message}`);
    }
    if (!res.ok) throw new UserError(`the service answered HTTP ${res.status} to GET /api/v1/${path}`);
    return (await res.json()) as T;
  };
  const [{ jobs }, { instances }] = await Promise.all([get<{ jobs: JobView[] }>('jobs'), get<{ instances: InstanceInfo[] }>('instances')]);
  return { jobs, instances };
}

export function scheduleText(s: JobView['schedule']): string {
  return s.every ? `every ${s.every}` : `cron "${s.cron}" ${s.timezone}`;
}

export function jobsTable(jobs: JobView[]): string {
  const last = (j: JobView) => (j.last_run ? `${j.last_run.status} ${String(j.last_run.finished_at ?? j.last_run.started_at)}` : '-');
  // A paused job's HEALTH reads `paused` (a drifting one's `config_drift`); who paused it, when and why (the keys) follow the table, one line each.
  const paused = jobs.filter((j) => j.health === 'paused' || j.health === 'config_drift').map((j) => `${j.name}: ${j.health_reason}\n`);
  return (
    table([
      ['JOB', 'ENABLED', 'SCOPE', 'SCHEDULE', 'HEALTH', 'WORST_INSTANCE', 'LAST_RUN', 'NEXT_ATTEMPT'],
      // WORST_INSTANCE: the replica an instance-scoped job's health comes from (judged per live replica).
      ...jobs.map((j) => [j.name, String(j.enabled), j.scope, scheduleText(j.schedule), j.health, j.worst_instance ?? '-', last(j), j.next_attempt ?? '-']),
    ]) + (paused.length ? `\n${paused.join('')}` : '')
  );
}

export function statusText(view: LiveView): string {
  const alive = view.instances.filter((i) => i.alive);
  const counts = new Map<string, number>();
  for (const j of view.jobs) counts.set(j.health, (counts.get(j.health) ?? 0) + 1);
  const unhealthy = view.jobs.filter((j) => j.health === 'late' || j.health === 'stuck' || j.health === 'failing' || j.health === 'paused' || j.health === 'config_drift');
  return [
    `instances: ${alive.length} alive of ${view.instances.length} known\n`,
    table([
      ['INSTANCE', 'ALIVE', 'HOST', 'PID', 'HTTP_PORT', 'VERSION', 'STARTED_AT', 'HEARTBEAT_AT'],
      ...view.instances.map((i) => [i.instance_id, String(i.alive), i.hostname, String(i.pid), String(i.http_port ?? '-'), i.version, String(i.started_at), String(i.heartbeat_at)]),
    ]),
    `jobs: ${[...counts].map(([h, n]) => `${n} ${h}`).join(', ')}\n`,
    ...unhealthy.map((j) => `  ${j.name}: ${j.health} (${j.health_reason})\n`),
  ].join('');
}

export { table } from './table.js';

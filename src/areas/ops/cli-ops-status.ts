import type { Config } from '../../config/load.js';
import { UserError } from '../../config/errors.js';
import type { CliContext } from '../../modules/area.js';
import type { OpsServices } from './wiring.js';
import { readEmbeddedAdminToken } from '../../app/admin-token.js';
import { DataDirLock } from '../../store/data-dir-lock.js';
import { overview } from './overview.js';

type Overview = Awaited<ReturnType<typeof overview>>;

/**
 * `relay-jobs ops status [--json]`: the ops overview (health score and its parts, firing alerts,
 * jobs by health, instances). Reads the database directly; in embedded mode with a running
 * service, asks that service (it owns the data directory).
 */
export async function opsStatus(config: Config, json: boolean, cli: CliContext): Promise<number> {
  const o = await fetchOverview(cli, config);
  process.stdout.write(json ? JSON.stringify(o, null, 2) + '\n' : render(o));
  return o.health_score !== null && o.health_score < 50 ? 1 : 0;
}

async function fetchOverview(cli: CliContext, config: Config): Promise<Overview> {
  if (config.mode === 'embedded') {
    const owner = DataDirLock.liveOwner(config.database.data_dir);
    if (owner) {
      const token = config.http.admin_token ?? readEmbeddedAdminToken(config.database.data_dir);
      if (!token) throw new UserError(`a relay-jobs service owns ${config.database.data_dir} but no admin token is available (set RELAY_JOBS_ADMIN_TOKEN)`);
      const res = await fetch(`http://127.0.0.1:${owner.http_port ?? config.http.port}/api/v1/ops/overview`, { headers: { authorization: `Bearer ${token}` } }).catch((err: Error) => {
        throw new UserError(`the service owning ${config.database.data_dir} did not answer: ${err.message}`);
      });
      if (!res.ok) throw new UserError(`the service answered HTTP ${res.status}`);
      return (await res.json()) as Overview;
    }
  }
  const rt = await cli.runtime<OpsServices>(config);
  try {
    return await overview({
      ops: rt.services.ops,
      bucketMs: config.ops.bucket,
      alertIntervalMs: config.ops.alert_interval,
      now: rt.clock.now(),
      jobs: await rt.jobViews(),
      instances: await rt.instances(),
    });
  } finally {
    await rt.shutdown('ops status printed');
  }
}

const mib = (bytes: number) => `${Math.round(bytes / 1048576)}MiB`;
/** A replica's process figures from its newest fresh heartbeat; a dash when it has none. */
function figures(p: Overview['instances'][number]['process']): string {
  if (!p) return '  process -';
  const lag = p.event_loop_lag_p99_ms === null ? '?' : `${p.event_loop_lag_p99_ms}ms`;
  const cpu = p.cpu_percent === null ? '?' : `${p.cpu_percent}%`;
  return `  rss ${mib(p.rss_bytes)}  heap ${mib(p.heap_used_bytes)}  loop p99 ${lag}  cpu ${cpu}`;
}

/** The notification outbox at the last bucket: backlog, the part waiting for a channel's rate limit, age of the oldest. */
function outbox(m: Overview['latest_metrics']): string {
  const v = (k: string) => (typeof m?.[k] === 'number' ? String(m[k]) : '?');
  return `backlog ${v('notification_backlog')} (${v('notification_rate_limited')} waiting for the rate limit), oldest ${v('outbox_lag_seconds')}s`;
}

function render(o: Overview): string {
  const p = o.health_parts;
  const part = (v: number | null) => (v === null ? '?' : String(v));
  const lines = [
    `health ${o.health_score ?? '?'}/100   errors ${part(p.errors)}  jobs ${part(p.jobs)}  alerts ${part(p.alerts)}  freshness ${part(p.freshness)}   error rate ${p.error_rate === null ? 'unknown' : `${(p.error_rate * 100).toFixed(2)}%`}`,
    `last bucket ${o.latest_bucket ?? 'none'}${o.collector_fresh ? '' : '  (collector not running: ops_metrics)'}`,
    `outbox: ${outbox(o.latest_metrics)}`,
    '',
    `firing alerts: ${o.firing_alerts.length}`,
    ...o.firing_alerts.map(
      (e) =>
        `  ${e.severity.padEnd(8)} ${e.rule_name}${e.labels.monitor ? ` (monitor ${e.labels.monitor})` : ''}  ${e.metric}=${e.value ?? '?'}  since ${e.fired_at}${e.silenced ? '  (silenced)' : ''}`,
    ),
    '',
    `jobs: ${
      Object.entries(o.jobs_by_health)
        .map(([h, n]) => `${h} ${n}`)
        .join(', ') || 'none'
    }`,
    '',
    `instances: ${o.instances.filter((i) => i.alive).length} alive of ${o.instances.length}`,
    ...o.instances.map((i) => `  ${i.instance_id.padEnd(20)} ${i.alive ? 'alive' : 'gone '}  heartbeat ${i.heartbeat_at}  skew ${i.clock_skew_ms ?? '?'}ms  ${i.version}${figures(i.process)}`),
  ];
  return lines.join('\n') + '\n';
}

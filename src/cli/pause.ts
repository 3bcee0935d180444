import { hostname, userInfo } from 'node:os';
import type { Config } from '../config/load.js';
import { UserError } from '../config/errors.js';
import { buildJobs } from '../app/registry.js';
import { closest } from '../config/closest.js';
import { DataDirLock } from '../store/data-dir-lock.js';
import { PAUSE_REASON_MAX, describePause, type JobPause } from '../coordination/job-pauses.js';
import { adminRequest } from './admin-client.js';
import { oneShotRuntime } from './cli-context.js';

type PauseLine = { job: string; action: 'pause' | 'resume'; changed: boolean; paused: { at: string; by: string; reason: string } | null; message: string };

/** Who the audit row names for a CLI change: the operator's user and host (the command talks to the database directly). */
function cliActor(): string {
  let user = 'unknown';
  try {
    user = userInfo().username;
  } catch {
    // no passwd entry (a container's random uid): the host still says where it came from
  }
  return `cli ${user}@${hostname()}`;
}

function checkJob(config: Config, name: string): void {
  const known = buildJobs(config).map((j) => j.name);
  if (known.includes(name)) return;
  const near = closest(name, known);
  throw new UserError(`unknown job "${name}"${near ? `; did you mean ${near}?` : ''} (known jobs: ${known.join(', ')})`);
}

function checkReason(reason: string | undefined, required: boolean): string | null {
  const r = reason?.trim();
  if (reason === undefined && !required) return null;
  if (!r) throw new UserError(`--reason: say why the job is paused (1-${PAUSE_REASON_MAX} characters), e.g. --reason "provider outage"`);
  if (r.length > PAUSE_REASON_MAX) throw new UserError(`--reason: at most ${PAUSE_REASON_MAX} characters (got ${r.length})`);
  return r;
}

const view = (p: JobPause) => ({ at: p.at.toISOString(), by: p.by, reason: p.reason });
/** A pause as the API answers it (`paused`, `was`, `error.paused`), in describePause's words. */
export const describePauseView = (job: string, p: NonNullable<PauseLine['paused']>): string => describePause({ job, at: new Date(p.at), by: p.by, reason: p.reason });

/**
 * `relay-jobs jobs pause <job> --reason TEXT` and `relay-jobs jobs resume <job>`: cluster-wide and
 * persisted (issue 49). In cluster mode (or embedded with no service running) the command writes
 * `job_state` and the audit row itself; the replicas learn it from the `job_pauses` notification.
 * In embedded mode with a running service, the service's API does it (it owns the database).
 * Exit 0 changed, 3 nothing to change (already paused / not paused; the line says so), 2 bad input.
 */
export async function pauseCommand(config: Config, action: 'pause' | 'resume', name: string, opts: { reason?: string; json?: boolean }): Promise<number> {
  checkJob(config, name);
  const reason = checkReason(opts.reason, action === 'pause');
  let line: PauseLine;
  const owner = config.mode === 'embedded' ? DataDirLock.liveOwner(config.database.data_dir) : null;
  if (owner) {
    const url = `http://127.0.0.1:${owner.http_port ?? config.http.port}`;
    const res = await adminRequest<{ paused?: PauseLine['paused']; was?: PauseLine['paused']; error?: { code: string; message: string; paused?: PauseLine['paused'] } }>(
      config,
      url,
      'POST',
      `/jobs/${encodeURIComponent(name)}/${action}`,
      reason === null ? {} : { reason },
    );
    if (res.status !== 200 && res.status !== 409) throw new UserError(`the service refused to ${action} ${name} (HTTP ${res.status}): ${res.body.error?.message ?? 'no reason given'}`);
    const changed = res.status === 200;
    const paused = action === 'pause' ? (res.body.paused ?? res.body.error?.paused ?? null) : null;
    // The same words as without a service: the API's views carry what describePause needs.
    const was = res.body.was ? describePauseView(name, res.body.was) : null;
    const message = !changed ? res.body.error!.message : paused ? `job ${name} ${describePauseView(name, paused)}` : `job ${name} resumed${was ? ` (was ${was})` : ''}`;
    line = { job: name, action, changed, paused, message };
  } else {
    const rt = await oneShotRuntime(config);
    try {
      if (action === 'pause') {
        const r = await rt.pauses.pause(name, cliActor(), reason!);
        line = { job: name, action, changed: r.changed, paused: view(r.pause), message: r.changed ? `job ${name} ${describePause(r.pause)}` : `job ${name} is already ${describePause(r.pause)}` };
      } else {
        const r = await rt.pauses.resume(name, cliActor(), reason);
        line = { job: name, action, changed: r.changed, paused: null, message: r.changed ? `job ${name} resumed (was ${describePause(r.was!)})` : `job ${name} is not paused; nothing to resume` };
      }
    } finally {
      await rt.shutdown(`one-shot ${action} finished`);
    }
  }
  process.stdout.write(opts.json ? JSON.stringify(line) + '\n' : `${line.message}\n`);
  return line.changed ? 0 : 3;
}

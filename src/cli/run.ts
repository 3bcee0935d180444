import type { Config } from '../config/load.js';
import { UserError } from '../config/errors.js';
import { readEmbeddedAdminToken } from '../app/admin-token.js';
import { buildJobs } from '../app/registry.js';
import { closest } from '../config/closest.js';
import { DataDirLock } from '../store/data-dir-lock.js';
import { oneShotRuntime } from './cli-context.js';
import { delay } from '../time/wall.js';
import { describePauseView } from './pause.js';

type Outcome = { status: string; items?: number | null; note?: string | null; error?: string | null; run_id?: number; fencing_token?: number | null };

/** One shape for every way a run ends (standalone, through the service, not started): the same keys, null when empty. */
function outcomeLine(job: string, o: Outcome) {
  return { job, run_id: o.run_id ?? null, fencing_token: o.fencing_token ?? null, status: o.status, items: o.items ?? null, note: o.note ?? null, error: o.error ?? null };
}

/** What a paused job's refusal says on the command line: the CLI's own commands, not the API's routes. */
const pausedNote = (name: string, reason: string) => `job ${name} is ${reason}; \`relay-jobs jobs resume ${name}\`, or run it anyway with --force`;

function exitCode(o: Outcome): number {
  if (o.status === 'ok' || o.status === 'no_work') return 0;
  if (o.status === 'not_started') return 3;
  return 1;
}

/**
 * `relay-jobs run <job> [--force]`: one manual round through the same lock, claim and lease as a
 * scheduled one; prints the outcome as JSON. Exit 0 ok/no_work, 1 failed/timed_out, 3 not
 * started (another round holds the job, or it is paused and `--force` was not given). In embedded mode with a running service on the data
 * directory, the round is asked of that service over its HTTP API (it owns the database).
 */
export async function runJob(config: Config, name: string, opts: { force?: boolean } = {}): Promise<number> {
  const known = buildJobs(config).map((j) => j.name);
  if (!known.includes(name)) {
    const near = closest(name, known);
    throw new UserError(`unknown job "${name}"${near ? `; did you mean ${near}?` : ''} (known jobs: ${known.join(', ')})`);
  }
  if (config.mode === 'embedded') {
    const owner = DataDirLock.liveOwner(config.database.data_dir);
    if (owner) return runViaService(config, name, owner.http_port ?? config.http.port, opts.force === true);
  }
  const rt = await oneShotRuntime(config);
  try {
    const report = await rt.runNow(name, undefined, { force: opts.force });
    const out: Outcome = report.ran
      ? { run_id: report.runId, fencing_token: report.token, status: report.outcome.status, items: report.outcome.items, note: report.outcome.note ?? null, error: report.outcome.error ?? null }
      : { status: 'not_started', note: report.paused ? pausedNote(name, report.reason) : report.reason };
    process.stdout.write(JSON.stringify(outcomeLine(name, out)) + '\n');
    return exitCode(out);
  } finally {
    await rt.shutdown('one-shot run finished');
  }
}

async function runViaService(config: Config, name: string, port: number, force: boolean): Promise<number> {
  const token = config.http.admin_token ?? readEmbeddedAdminToken(config.database.data_dir);
  if (!token) throw new UserError(`a relay-jobs service owns ${config.database.data_dir} but no admin token is available (set RELAY_JOBS_ADMIN_TOKEN)`);
  const base = `http://127.0.0.1:${port}/api/v1/jobs/${encodeURIComponent(name)}`;
  const headers = { authorization: `Bearer ${token}` };
  let res: Response;
  try {
    res = await fetch(`${base}/run${force ? '?force=true' : ''}`, { method: 'POST', headers });
  } catch (err) {
    throw new UserError(`a relay-jobs service owns ${config.database.data_dir} but its API at 127.0.0.1:${port} did not answer: ${(err as Error).message}`);
  }
  const body = (await res.json()) as { run_id?: number; error?: { message: string; paused?: { at: string; by: string; reason: string } } };
  if (res.status === 409) {
    const paused = body.error?.paused;
    const note = paused ? pausedNote(name, describePauseView(name, paused)) : (body.error?.message ?? null);
    process.stdout.write(JSON.stringify(outcomeLine(name, { status: 'not_started', note })) + '\n');
    return 3;
  }
  if (res.status !== 202) throw new UserError(`service refused the run (HTTP ${res.status}): ${body.error?.message ?? 'no reason given'}`);
  for (;;) {
    await delay(250);
    const poll = await fetch(`${base}/runs/${body.run_id}`, { headers });
    const { run } = (await poll.json()) as { run: Outcome & { id: number } };
    if (run.status !== 'running') {
      process.stdout.write(JSON.stringify(outcomeLine(name, { run_id: run.id, fencing_token: run.fencing_token, status: run.status, items: run.items, note: run.note, error: run.error })) + '\n');
      return exitCode(run);
    }
  }
}

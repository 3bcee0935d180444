import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../jobs/area.js';
import { AppError, Conflict, InvalidInput, notFound } from '../errors/app-error.js';
import { pauseView } from '../jobs/job-views.js';
import { PAUSE_REASON_MAX, describePause } from '../coordination/job-pauses.js';
import { parseBody } from './validation.js';
import { sessionToken } from './auth.js';
import { sameSecret } from './console-cookie.js';

/** What the job and instance routes use of the runtime, and nothing else. */
export type JobRouteDeps = Pick<RouteDeps, 'jobViews' | 'records' | 'jobs' | 'isShuttingDown' | 'runNow' | 'instances' | 'pauses' | 'adminToken'>;

const reasonText = z
  .string({ message: `a reason is required: why the job is paused (1-${PAUSE_REASON_MAX} characters)` })
  .trim()
  .min(1, { message: `must not be empty: say why (1-${PAUSE_REASON_MAX} characters)` })
  .max(PAUSE_REASON_MAX, { message: `at most ${PAUSE_REASON_MAX} characters` });
const PauseBody = z.strictObject({ reason: reasonText });
const ResumeBody = z.strictObject({ reason: reasonText.optional() });

/** `?force=true` (or `1`) runs a paused job anyway; anything else but `false`/`0` is a 400 naming `force`. */
function forceFlag(query: unknown): boolean {
  const raw = (query as { force?: unknown } | undefined)?.force;
  if (raw === undefined || raw === 'false' || raw === '0') return false;
  if (raw === 'true' || raw === '1' || raw === '') return true;
  throw new InvalidInput([{ field: 'force', message: 'expected true or false' }]);
}

/**
 * Who changed a pause, for the audit row: the admin token, or a session named by the first 12 hex
 * digits of its `admin_sessions.token_hash` (enough to find it, never the token).
 */
function actor(req: FastifyRequest, adminToken: string | undefined): string {
  const auth = sessionToken(req);
  if (!auth) return 'unknown';
  if (!auth.viaCookie && adminToken && sameSecret(auth.token, adminToken)) return 'admin token';
  return `session ${createHash('sha256').update(auth.token).digest('hex').slice(0, 12)}${auth.viaCookie ? ' (console)' : ''}`;
}

/**
 * `GET /jobs`, `GET /jobs/:name`, `GET /jobs/:name/runs/:id`, `POST /jobs/:name/run`,
 * `POST /jobs/:name/pause|resume`, `GET /instances`.
 */
export function registerJobRoutes(api: FastifyInstance, deps: JobRouteDeps): void {
  api.get('/jobs', async () => ({ jobs: await deps.jobViews() }));

  api.get<{ Params: { name: string } }>('/jobs/:name', async (req) => {
    const view = (await deps.jobViews()).find((j) => j.name === req.params.name);
    if (!view) notFound(`unknown job ${req.params.name}; GET /api/v1/jobs lists them`);
    return { job: view, runs: await deps.records.recent(view.name, 50), skips: await deps.records.skipSummary(view.name), pauses: await deps.pauses.audit(view.name, 20) };
  });

  api.get<{ Params: { name: string; id: string } }>('/jobs/:name/runs/:id', async (req) => {
    const id = Number(req.params.id);
    const run = Number.isSafeInteger(id) ? await deps.records.get(id) : null;
    if (!run || run.job_name !== req.params.name) notFound(`no run ${req.params.id} of job ${req.params.name}`);
    return { run };
  });

  api.post<{ Params: { name: string } }>('/jobs/:name/run', async (req, reply) => {
    const job = deps.jobs.find((j) => j.name === req.params.name);
    if (!job) notFound(`unknown job ${req.params.name}; GET /api/v1/jobs lists them`);
    const force = forceFlag(req.query);
    if (deps.isShuttingDown) throw new AppError('unavailable', 'shutting_down', 'this replica is shutting down; retry on another');
    // Answer as soon as the round is claimed (202) or refused (409); the round goes on.
    type Refused = { reason: string; paused?: Parameters<typeof pauseView>[0] };
    const started = await new Promise<{ runId: number; token: number } | Refused>((resolve) => {
      deps.runNow(job.name, resolve, { force }).then(
        (report) => !report.ran && resolve({ reason: report.reason, paused: report.paused }),
        (err: Error) => resolve({ reason: err.message }),
      );
    });
    if ('reason' in started && started.paused) {
      throw new Conflict('paused', `job ${job.name} is ${started.reason}; resume it (POST /api/v1/jobs/${job.name}/resume) or run it anyway with ?force=true`, {
        paused: pauseView(started.paused),
      });
    }
    if ('reason' in started) throw new Conflict('busy', `job ${job.name} not started: ${started.reason}`);
    return reply.code(202).send({ run_id: started.runId, fencing_token: started.token, status: 'running', poll: `/api/v1/jobs/${job.name}/runs/${started.runId}` });
  });

  // Pause and resume (issue 49): cluster-wide, persisted in job_state, one audit row per change.
  // Pausing a paused job or resuming one that is not paused changes nothing and answers 409
  // (`already_paused` naming the standing pause, `not_paused`): a second reason is never silently dropped.
  api.post<{ Params: { name: string } }>('/jobs/:name/pause', async (req) => {
    const job = deps.jobs.find((j) => j.name === req.params.name);
    if (!job) notFound(`unknown job ${req.params.name}; GET /api/v1/jobs lists them`);
    const { reason } = parseBody(PauseBody, req.body);
    const r = await deps.pauses.pause(job.name, actor(req, deps.adminToken), reason);
    if (!r.changed) throw new Conflict('already_paused', `job ${job.name} is already ${describePause(r.pause)}`, { paused: pauseView(r.pause) });
    return { job: job.name, health: 'paused', paused: pauseView(r.pause) };
  });

  api.post<{ Params: { name: string } }>('/jobs/:name/resume', async (req) => {
    const job = deps.jobs.find((j) => j.name === req.params.name);
    if (!job) notFound(`unknown job ${req.params.name}; GET /api/v1/jobs lists them`);
    const { reason } = parseBody(ResumeBody, req.body);
    const r = await deps.pauses.resume(job.name, actor(req, deps.adminToken), reason ?? null);
    if (!r.changed) throw new Conflict('not_paused', `job ${job.name} is not paused; nothing to resume`);
    return { job: job.name, resumed: true, was: r.was ? pauseView(r.was) : null };
  });

  api.get('/instances', async () => ({ instances: await deps.instances() }));
}

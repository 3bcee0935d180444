import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../modules/area.js';
import { AppError, Conflict, notFound } from '../errors/app-error.js';
import { pauseView } from '../modules/job-views.js';
import { PAUSE_REASON_MAX, describePause } from '../coordination/job-pauses.js';
import { json, route } from './contract.js';
import { Instance, JobView, PauseAudit, PauseView, RunRecord, SkipCount } from './kernel-schemas.js';
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
const RunQuery = z.object({
  force: z.enum(['true', '1', '', 'false', '0'], { error: 'expected true or false' }).optional().meta({ description: '`true` runs a paused job anyway' }),
});
const forced = (raw: string | undefined) => raw === 'true' || raw === '1' || raw === '';

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

const JobName = z.object({ name: z.string().meta({ description: 'the job name (GET /api/v1/jobs lists them)' }) });
const RunId = z.object({ name: z.string(), id: z.string().meta({ description: 'the run id' }) });
const UNKNOWN_JOB = 'unknown job';

/**
 * `GET /jobs`, `GET /jobs/:name`, `GET /jobs/:name/runs/:id`, `POST /jobs/:name/run`,
 * `POST /jobs/:name/pause|resume`, `GET /instances`.
 */
export function registerJobRoutes(api: FastifyInstance, deps: JobRouteDeps): void {
  const tag = 'jobs';
  route(
    api,
    { method: 'GET', path: '/jobs', operationId: 'listJobs', summary: 'Every job with its settings, health and last round', tag, responses: { 200: json(z.object({ jobs: z.array(JobView) })) } },
    async () => ({ jobs: await deps.jobViews() }),
  );

  route(
    api,
    {
      method: 'GET',
      path: '/jobs/:name',
      operationId: 'getJob',
      summary: 'One job: its view, its newest 50 rounds, skip counts per replica and pause audit',
      tag,
      params: JobName,
      responses: { 200: json(z.object({ job: JobView, runs: z.array(RunRecord), skips: z.array(SkipCount), pauses: z.array(PauseAudit) })) },
      errors: { 404: UNKNOWN_JOB },
    },
    async ({ params }) => {
      const view = (await deps.jobViews()).find((j) => j.name === params.name);
      if (!view) notFound(`unknown job ${params.name}; GET /api/v1/jobs lists them`);
      return { job: view, runs: await deps.records.recent(view.name, 50), skips: await deps.records.skipSummary(view.name), pauses: await deps.pauses.audit(view.name, 20) };
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/jobs/:name/runs/:id',
      operationId: 'getJobRun',
      summary: 'One round of a job (poll a manual run here)',
      tag,
      params: RunId,
      responses: { 200: json(z.object({ run: RunRecord })) },
      errors: { 404: 'no such run of this job' },
    },
    async ({ params }) => {
      const id = Number(params.id);
      const run = Number.isSafeInteger(id) ? await deps.records.get(id) : null;
      if (!run || run.job_name !== params.name) notFound(`no run ${params.id} of job ${params.name}`);
      return { run };
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/jobs/:name/run',
      operationId: 'runJob',
      summary: 'Run a job now',
      description: 'Answers 202 as soon as the round is claimed; the round goes on. Poll the `poll` URL for its outcome.',
      tag,
      params: JobName,
      query: RunQuery,
      responses: {
        202: json(
          z.object({ run_id: z.number().int(), fencing_token: z.number().int(), status: z.literal('running'), poll: z.string().meta({ description: "the run's URL" }) }).meta({ id: 'RunStarted' }),
        ),
      },
      errors: {
        404: UNKNOWN_JOB,
        409: '`paused` (with the standing pause in `error.paused`; `?force=true` runs it anyway) or `busy` (a round of this job is running)',
        503: '`shutting_down`: this replica is shutting down; retry on another',
      },
    },
    async ({ params, query }, _req, reply) => {
      const job = deps.jobs.find((j) => j.name === params.name);
      if (!job) notFound(`unknown job ${params.name}; GET /api/v1/jobs lists them`);
      const force = forced(query.force);
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
    },
  );

  // Pause and resume (issue 49): cluster-wide, persisted in job_state, one audit row per change.
  // Pausing a paused job or resuming one that is not paused changes nothing and answers 409
  // (`already_paused` naming the standing pause, `not_paused`): a second reason is never silently dropped.
  route(
    api,
    {
      method: 'POST',
      path: '/jobs/:name/pause',
      operationId: 'pauseJob',
      summary: 'Pause a job cluster-wide (no round starts anywhere until it is resumed)',
      tag,
      params: JobName,
      body: PauseBody,
      responses: { 200: json(z.object({ job: z.string(), health: z.literal('paused'), paused: PauseView })) },
      errors: { 404: UNKNOWN_JOB, 409: '`already_paused`: the job is already paused (the standing pause in `error.paused`)' },
    },
    async ({ params, body }, req) => {
      const job = deps.jobs.find((j) => j.name === params.name);
      if (!job) notFound(`unknown job ${params.name}; GET /api/v1/jobs lists them`);
      const r = await deps.pauses.pause(job.name, actor(req, deps.adminToken), body.reason);
      if (!r.changed) throw new Conflict('already_paused', `job ${job.name} is already ${describePause(r.pause)}`, { paused: pauseView(r.pause) });
      return { job: job.name, health: 'paused', paused: pauseView(r.pause) };
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/jobs/:name/resume',
      operationId: 'resumeJob',
      summary: 'Resume a paused job',
      tag,
      params: JobName,
      body: ResumeBody,
      responses: { 200: json(z.object({ job: z.string(), resumed: z.literal(true), was: PauseView.nullable() })) },
      errors: { 404: UNKNOWN_JOB, 409: '`not_paused`: the job is not paused' },
    },
    async ({ params, body }, req) => {
      const job = deps.jobs.find((j) => j.name === params.name);
      if (!job) notFound(`unknown job ${params.name}; GET /api/v1/jobs lists them`);
      const r = await deps.pauses.resume(job.name, actor(req, deps.adminToken), body.reason ?? null);
      if (!r.changed) throw new Conflict('not_paused', `job ${job.name} is not paused; nothing to resume`);
      return { job: job.name, resumed: true, was: r.was ? pauseView(r.was) : null };
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/instances',
      operationId: 'listInstances',
      summary: 'The replicas: live ones and those stopped or dead (`alive: false`)',
      tag: 'instances',
      responses: { 200: json(z.object({ instances: z.array(Instance) })) },
    },
    async () => ({ instances: await deps.instances() }),
  );
}

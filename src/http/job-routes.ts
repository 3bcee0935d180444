import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../jobs/area.js';
import { AppError, Conflict, notFound } from '../errors/app-error.js';

/** What the job and instance routes use of the runtime, and nothing else. */
export type JobRouteDeps = Pick<RouteDeps, 'jobViews' | 'records' | 'jobs' | 'isShuttingDown' | 'runNow' | 'instances'>;

/** `GET /jobs`, `GET /jobs/:name`, `GET /jobs/:name/runs/:id`, `POST /jobs/:name/run`, `GET /instances`. */
export function registerJobRoutes(api: FastifyInstance, deps: JobRouteDeps): void {
  api.get('/jobs', async () => ({ jobs: await deps.jobViews() }));

  api.get<{ Params: { name: string } }>('/jobs/:name', async (req) => {
    const view = (await deps.jobViews()).find((j) => j.name === req.params.name);
    if (!view) notFound(`unknown job ${req.params.name}; GET /api/v1/jobs lists them`);
    return { job: view, runs: await deps.records.recent(view.name, 50), skips: await deps.records.skipSummary(view.name) };
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
    if (deps.isShuttingDown) throw new AppError('unavailable', 'shutting_down', 'this replica is shutting down; retry on another');
    // Answer as soon as the round is claimed (202) or refused (409); the round goes on.
    const started = await new Promise<{ runId: number; token: number } | { reason: string }>((resolve) => {
      deps.runNow(job.name, resolve).then(
        (report) => !report.ran && resolve({ reason: report.reason }),
        (err: Error) => resolve({ reason: err.message }),
      );
    });
    if ('reason' in started) throw new Conflict('busy', `job ${job.name} not started: ${started.reason}`);
    return reply.code(202).send({ run_id: started.runId, fencing_token: started.token, status: 'running', poll: `/api/v1/jobs/${job.name}/runs/${started.runId}` });
  });

  api.get('/instances', async () => ({ instances: await deps.instances() }));
}

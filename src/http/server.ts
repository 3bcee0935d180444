import Fastify, { type FastifyInstance } from 'fastify';
import type { Runtime } from '../app/runtime.js';
import { requireAdmin } from './auth.js';
import { handleError } from './errors.js';
import { AppError, Conflict, notFound } from '../errors/app-error.js';
import { assertStorable } from './validation.js';
import { AREAS } from '../jobs/registry.js';
import { registerConsoleRoutes } from './console-routes.js';
import { clientErrorHandler, frameworkErrors, serverTimeouts } from './connection-limits.js';
import { registerTimelineRoutes } from './timeline-routes.js';
import { registerEventRoutes } from './event-streams.js';

/**
 * Body size limits. Most admin payloads are a few fields, so the default is small; the routes
 * that take lists say so (usage batches, account imports, quota increments, idempotency bodies).
 * Unauthenticated requests never get this far: the token is checked before the body is read.
 */
export const BODY_LIMIT = 64 * 1024;

/** Probes, metrics and the admin API. Routes call the runtime; they know no SQL and no Redis keys. */
export function buildHttpServer(rt: Runtime): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: BODY_LIMIT, forceCloseConnections: 'idle', ...serverTimeouts(rt.config), clientErrorHandler, frameworkErrors });

  app.setErrorHandler(handleError(rt.log));
  app.setNotFoundHandler(async (req) => notFound(`no route ${req.method} ${req.url.slice(0, 200)}`));
  // API answers carry tokens, balances and personal data: no browser or proxy keeps them.
  app.addHook('onRequest', async (req, reply) => {
    if (!req.url.startsWith('/assets/') && req.url !== '/' && !req.url.startsWith('/?')) void reply.header('cache-control', 'no-store');
  });

  app.get('/healthz', async () => ({ status: 'ok', instance_id: rt.config.instance.id, mode: rt.config.mode }));
  app.get('/readyz', async (_req, reply) => {
    const r = await rt.readiness();
    // A probe's answer, not an error: the body is the readiness report itself, 503 while not ready.
    // eslint-disable-next-line no-restricted-syntax -- the one status a probe answers by, beside its report
    return reply.code(r.ready ? 200 : 503).send(r);
  });
  app.get('/metrics', async (_req, reply) => reply.type(rt.metrics.registry.contentType).send(await rt.metrics.registry.metrics()));

  // Every text field of every JSON API: no NUL, no lone surrogate, no hostile nesting (400 naming the field).
  app.addHook('preValidation', async (req) => {
    assertStorable(req.params, 'params');
    assertStorable(req.query, 'query');
    if (typeof req.body === 'object') assertStorable(req.body);
  });

  for (const area of AREAS) area.publicRoutes?.(app, rt);
  void app.register(
    async (api) => {
      // onRequest, not preHandler: an unauthenticated body is never read or parsed.
      api.addHook('onRequest', requireAdmin(rt));
      // Every other path under /api/v1 lands here, after the hook above: 401 to a caller without a token
      // (routes cannot be listed by probing), 404 only after auth.
      api.all('/*', async (req) => notFound(`no route ${req.method} ${req.url.slice(0, 200)}`));

      api.get('/jobs', async () => ({ jobs: await rt.jobViews() }));

      api.get<{ Params: { name: string } }>('/jobs/:name', async (req) => {
        const view = (await rt.jobViews()).find((j) => j.name === req.params.name);
        if (!view) notFound(`unknown job ${req.params.name}; GET /api/v1/jobs lists them`);
        return { job: view, runs: await rt.records.recent(view.name, 50), skips: await rt.records.skipSummary(view.name) };
      });

      api.get<{ Params: { name: string; id: string } }>('/jobs/:name/runs/:id', async (req) => {
        const id = Number(req.params.id);
        const run = Number.isSafeInteger(id) ? await rt.records.get(id) : null;
        if (!run || run.job_name !== req.params.name) notFound(`no run ${req.params.id} of job ${req.params.name}`);
        return { run };
      });

      api.post<{ Params: { name: string } }>('/jobs/:name/run', async (req, reply) => {
        const job = rt.scheduler.job(req.params.name);
        if (!job) notFound(`unknown job ${req.params.name}; GET /api/v1/jobs lists them`);
        if (rt.isShuttingDown) throw new AppError('unavailable', 'shutting_down', 'this replica is shutting down; retry on another');
        // Answer as soon as the round is claimed (202) or refused (409); the round goes on.
        const started = await new Promise<{ runId: number; token: number } | { reason: string }>((resolve) => {
          rt.runNow(job.name, resolve).then(
            (report) => !report.ran && resolve({ reason: report.reason }),
            (err: Error) => resolve({ reason: err.message }),
          );
        });
        if ('reason' in started) throw new Conflict('busy', `job ${job.name} not started: ${started.reason}`);
        return reply.code(202).send({ run_id: started.runId, fencing_token: started.token, status: 'running', poll: `/api/v1/jobs/${job.name}/runs/${started.runId}` });
      });

      api.get('/instances', async () => ({ instances: await rt.instances() }));
      registerTimelineRoutes(api, rt);
      // Before the areas' routes: its onResponse hook ends a session's streams at sign-out (admin's DELETE sessions/current).
      registerEventRoutes(api, rt);

      for (const area of AREAS) area.routes?.(api, rt);
    },
    { prefix: '/api/v1' },
  );
  registerConsoleRoutes(app);
  return app;
}

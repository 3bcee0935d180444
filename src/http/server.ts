import Fastify, { type FastifyInstance } from 'fastify';
import type { Runtime } from '../app/runtime.js';
import { requireAdmin, bearer } from './auth.js';
import { registerAccountRoutes } from './accounts-routes.js';
import { registerProxyRoutes } from './proxies-routes.js';
import { registerUsageRoutes } from './usage-routes.js';
import { registerBillingRoutes, registerPaymentWebhook } from './billing-routes.js';
import { registerBillingListRoutes } from './billing-list-routes.js';
import { registerSqlRoutes } from './sql-routes.js';
import { InvalidUsage } from '../jobs/usage/usage-ingest.js';
import { UsageQueueFull } from '../jobs/usage/usage-writer.js';
import { IdempotencyConflict } from '../store/idempotency.js';
import { AccountUnavailable } from '../jobs/accounts/token-api.js';
import { BadRequest } from './validation.js';

/** The hot path's refusals: unknown account, not serving, refresh failed, no new token in time. */
const UNAVAILABLE_STATUS = { not_found: 404, unavailable: 409, no_refresh_token: 409, refresh_failed: 502, timeout: 504 } as const;

const notFound = (what: string) => ({ error: { code: 'not_found', message: what } });

/** Probes, metrics and the admin API. Routes call the runtime; they know no SQL and no Redis keys. */
export function buildHttpServer(rt: Runtime): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: 1024 * 1024, forceCloseConnections: 'idle' });

  app.setErrorHandler((err: Error & { statusCode?: number }, _req, reply) => {
    if (err instanceof BadRequest) return void reply.code(400).send({ error: { code: 'invalid', message: err.message, fields: err.fields } });
    if (err instanceof InvalidUsage) return void reply.code(400).send({ error: { code: 'invalid', message: err.message, fields: err.fields } });
    if (err instanceof UsageQueueFull) return void reply.code(503).send({ error: { code: 'queue_full', message: err.message } });
    if (err instanceof IdempotencyConflict) return void reply.code(409).send({ error: { code: 'idempotency_conflict', message: err.message } });
    if (err instanceof AccountUnavailable) return void reply.code(UNAVAILABLE_STATUS[err.code]).send({ error: { code: err.code, message: err.message, ...(err.status ? { status: err.status } : {}) } });
    const status = err.statusCode && err.statusCode < 500 ? err.statusCode : 500;
    if (status === 500) rt.log.error({ err: err.message }, 'http handler failed');
    void reply.code(status).send({ error: { code: status === 500 ? 'internal' : 'bad_request', message: status === 500 ? 'internal error; see the service log' : err.message } });
  });
  app.setNotFoundHandler((req, reply) => void reply.code(404).send(notFound(`no route ${req.method} ${req.url}`)));

  app.get('/healthz', async () => ({ status: 'ok', instance_id: rt.config.instance.id, mode: rt.config.mode }));
  app.get('/readyz', async (_req, reply) => {
    const r = await rt.readiness();
    return reply.code(r.ready ? 200 : 503).send(r);
  });
  app.get('/metrics', async (_req, reply) => reply.type(rt.metrics.registry.contentType).send(await rt.metrics.registry.metrics()));

  registerPaymentWebhook(app, rt);
  void app.register(
    async (api) => {
      api.addHook('preHandler', requireAdmin(rt));

      api.get('/jobs', async () => ({ jobs: await rt.jobViews() }));

      api.get<{ Params: { name: string } }>('/jobs/:name', async (req, reply) => {
        const view = (await rt.jobViews()).find((j) => j.name === req.params.name);
        if (!view) return reply.code(404).send(notFound(`unknown job ${req.params.name}; GET /api/v1/jobs lists them`));
        return { job: view, runs: await rt.records.recent(view.name, 50) };
      });

      api.get<{ Params: { name: string; id: string } }>('/jobs/:name/runs/:id', async (req, reply) => {
        const id = Number(req.params.id);
        const run = Number.isSafeInteger(id) ? await rt.records.get(id) : null;
        if (!run || run.job_name !== req.params.name) return reply.code(404).send(notFound(`no run ${req.params.id} of job ${req.params.name}`));
        return { run };
      });

      api.post<{ Params: { name: string } }>('/jobs/:name/run', async (req, reply) => {
        const job = rt.scheduler.job(req.params.name);
        if (!job) return reply.code(404).send(notFound(`unknown job ${req.params.name}; GET /api/v1/jobs lists them`));
        if (rt.isShuttingDown) return reply.code(503).send({ error: { code: 'shutting_down', message: 'this replica is shutting down; retry on another' } });
        // Answer as soon as the round is claimed (202) or refused (409); the round goes on.
        const started = await new Promise<{ runId: number; token: number } | { reason: string }>((resolve) => {
          rt.runNow(job.name, resolve).then(
            (report) => !report.ran && resolve({ reason: report.reason }),
            (err: Error) => resolve({ reason: err.message }),
          );
        });
        if ('reason' in started) return reply.code(409).send({ error: { code: 'busy', message: `job ${job.name} not started: ${started.reason}` } });
        return reply.code(202).send({ run_id: started.runId, fencing_token: started.token, status: 'running', poll: `/api/v1/jobs/${job.name}/runs/${started.runId}` });
      });

      registerAccountRoutes(api, rt);
      registerProxyRoutes(api, rt);
      registerUsageRoutes(api, rt);
      registerBillingRoutes(api, rt);
      registerBillingListRoutes(api, rt);
      registerSqlRoutes(api, rt);

      api.get('/instances', async () => ({ instances: await rt.instances() }));

      api.post('/sessions', async (_req, reply) => {
        const s = await rt.sessions.create(rt.config.admin.session_ttl_minutes);
        return reply.code(201).send({ id: s.id, token: s.token, expires_at: s.expiresAt.toISOString() });
      });
      api.delete('/sessions/current', async (req, reply) => {
        const token = bearer(req)!;
        if (token === rt.adminToken) return reply.code(400).send({ error: { code: 'bad_request', message: 'the admin token is not a session; only session tokens can be revoked' } });
        await rt.sessions.revoke(token);
        return reply.code(204).send();
      });
    },
    { prefix: '/api/v1' },
  );
  return app;
}

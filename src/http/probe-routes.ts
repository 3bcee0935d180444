import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../modules/area.js';
import { json, media, route } from './contract.js';

const Readiness = z.object({ ready: z.boolean(), checks: z.record(z.string(), z.string()).meta({ description: 'each dependency and what it said (`ok` or why not)' }) }).meta({ id: 'Readiness' });

/** `GET /healthz`, `GET /readyz`, `GET /metrics`: for orchestrators and scrapers, no token. */
export function registerProbeRoutes(app: FastifyInstance, rt: Pick<RouteDeps, 'config' | 'metrics'> & { readiness(): Promise<z.infer<typeof Readiness>> }): void {
  const tag = 'probes';
  route(
    app,
    {
      method: 'GET',
      path: '/healthz',
      operationId: 'getHealth',
      summary: 'Liveness: the process answers',
      tag,
      responses: { 200: json(z.object({ status: z.literal('ok'), instance_id: z.string(), mode: z.enum(['embedded', 'cluster']) })) },
    },
    async () => ({ status: 'ok', instance_id: rt.config.instance.id, mode: rt.config.mode }),
  );
  route(
    app,
    {
      method: 'GET',
      path: '/readyz',
      operationId: 'getReadiness',
      summary: 'Readiness: the database and Redis answer and the replica is not shutting down',
      tag,
      responses: { 200: json(Readiness, { description: 'ready' }) },
      nonErrors: { 503: json(Readiness, { description: 'not ready: the same report, with the failing checks' }) },
    },
    async (_input, _req, reply) => {
      const r = await rt.readiness();
      // A probe's answer, not an error: the body is the readiness report itself, 503 while not ready.
      // eslint-disable-next-line no-restricted-syntax -- the one status a probe answers by, beside its report
      return reply.code(r.ready ? 200 : 503).send(r);
    },
  );
  route(
    app,
    {
      method: 'GET',
      path: '/metrics',
      operationId: 'getMetrics',
      summary: 'Prometheus metrics',
      tag,
      responses: { 200: media('text/plain; version=0.0.4; charset=utf-8', 'the Prometheus text format') },
    },
    async (_input, _req, reply) => reply.type(rt.metrics.registry.contentType).send(await rt.metrics.registry.metrics()),
  );
}

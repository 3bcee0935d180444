import type { FastifyInstance } from 'fastify';
import type { Runtime } from '../../app/runtime.js';
import { registerMonitorRoutes } from './monitors-routes.js';
import { registerAccountTestRoutes } from './account-tests-routes.js';

/** `/api/v1/monitors` and `/api/v1/account-tests` (fleet probes, docs/probes.md). */
export function registerProbeRoutes(api: FastifyInstance, rt: Runtime): void {
  registerMonitorRoutes(api, rt);
  registerAccountTestRoutes(api, rt);
}

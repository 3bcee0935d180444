import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../../modules/area.js';
import type { ProbeServices } from './wiring.js';
import type { AccountsFace } from '../accounts/index.js';
import { registerMonitorRoutes } from './monitors-routes.js';
import { registerAccountTestRoutes } from './account-tests-routes.js';

/** `/api/v1/monitors` and `/api/v1/account-tests` (fleet probes, docs/probes.md). */
export function registerProbeRoutes(api: FastifyInstance, deps: Pick<RouteDeps<ProbeServices & Pick<AccountsFace, 'accounts' | 'tokens'>>, 'clock' | 'config' | 'log' | 'services'>): void {
  registerMonitorRoutes(api, deps);
  registerAccountTestRoutes(api, deps);
}

import type { AreaModule } from '../../jobs/area.js';
import { sessionCleanupJob } from './session-cleanup.js';
import { registerDeadLetterRoutes } from './dead-letters-routes.js';
import { registerSqlRoutes } from './sql-routes.js';
import { registerSessionRoutes } from './session-routes.js';

/** The admin area as the area list sees it (README.md: its invariants). */
export const adminArea: AreaModule = {
  name: 'admin',
  jobs: [sessionCleanupJob],
  routes(api, deps) {
    registerDeadLetterRoutes(api, deps);
    registerSqlRoutes(api, deps);
    registerSessionRoutes(api, deps);
  },
};

import { defineArea } from '../../jobs/area.js';
import { snapshotConfig } from './config.js';
import { schedulerSnapshotJob } from './scheduler-snapshot.js';
import { registerSchedulerRoutes } from './scheduler-routes.js';

/** The scheduler snapshot area as the area list sees it (README.md: its invariants). */
export const schedulerSnapshotArea = defineArea({
  name: 'scheduler-snapshot',
  config: snapshotConfig,
  wiring: async () => (await import('./wiring.js')).schedulerWiring,
  jobs: [schedulerSnapshotJob],
  routes: (api, deps) => registerSchedulerRoutes(api, deps),
});

import { defineArea } from '../../modules/area.js';
import { snapshotConfig } from './config.js';
import { schedulerSnapshotJob } from './scheduler-snapshot.js';
import { registerSchedulerRoutes } from './scheduler-routes.js';
import { SchedulerMetrics } from './metrics.js';

/** The scheduler snapshot area as the area list sees it (README.md: its invariants). */
export const schedulerSnapshotArea = defineArea({
  name: 'scheduler-snapshot',
  config: snapshotConfig,
  wiring: async () => (await import('./wiring.js')).schedulerWiring,
  jobs: [schedulerSnapshotJob],
  metrics: [SchedulerMetrics],
  routes: (api, deps) => registerSchedulerRoutes(api, deps),
});

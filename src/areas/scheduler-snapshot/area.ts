import type { AreaModule } from '../../jobs/area.js';
import { schedulerSnapshotJob } from './scheduler-snapshot.js';
import { registerSchedulerRoutes } from './scheduler-routes.js';

/** The scheduler snapshot area as the area list sees it (README.md: its invariants). */
export const schedulerSnapshotArea: AreaModule = {
  name: 'scheduler-snapshot',
  jobs: [schedulerSnapshotJob],
  routes: (api, deps) => registerSchedulerRoutes(api, deps),
};

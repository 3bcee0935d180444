import type { AreaModule } from '../../jobs/area.js';
import { channelMonitorJob } from './channel-monitor.js';
import { scheduledAccountTestJob } from './scheduled-account-test.js';
import { registerProbeRoutes } from './probes-routes.js';

/** The probes area as the area list sees it (README.md: its invariants). */
export const probesArea: AreaModule = {
  name: 'probes',
  jobs: [channelMonitorJob, scheduledAccountTestJob],
  routes: (api, deps) => registerProbeRoutes(api, deps),
};

import { defineArea } from '../../modules/area.js';
import { probesConfig } from './config.js';
import { channelMonitorJob } from './channel-monitor.js';
import { scheduledAccountTestJob } from './scheduled-account-test.js';
import { registerProbeRoutes } from './probes-routes.js';
import { ProbesMetrics } from './metrics.js';
import { probesMigrations } from './store/migrations/index.js';

/** The probes area as the area list sees it (README.md: its invariants). Probes sign in with account tokens (AccountsFace). */
export const probesArea = defineArea({
  name: 'probes',
  config: probesConfig,
  wiring: async () => (await import('./wiring.js')).buildProbes,
  jobs: [channelMonitorJob, scheduledAccountTestJob],
  metrics: [ProbesMetrics],
  migrations: probesMigrations,
  routes: (api, deps) => registerProbeRoutes(api, deps),
});

import { defineArea } from '../../modules/area.js';
import { changeStreamConfig } from './config.js';
import { changeStreamJob } from './change-stream.js';
import { registerChangeRoutes } from './changes-routes.js';
import { ChangeStreamMetrics } from './metrics.js';
import { changeStreamMigrations } from './store/migrations/index.js';

/** The gateway change stream as the area list sees it (README.md: its invariants; docs/change-stream.md). */
export const changeStreamArea = defineArea({
  name: 'change-stream',
  config: changeStreamConfig,
  wiring: async () => (await import('./wiring.js')).changeStreamWiring,
  jobs: [changeStreamJob],
  migrations: changeStreamMigrations,
  metrics: [ChangeStreamMetrics],
  routes: (api, deps) => registerChangeRoutes(api, deps),
});

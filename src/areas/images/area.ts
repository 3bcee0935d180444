import { defineArea } from '../../modules/area.js';
import { imagesConfig } from './config.js';
import { batchImageWorkerJob } from './batch-image-worker.js';
import { registerImageBatchRoutes } from './image-batches-routes.js';
import { ImagesMetrics } from './metrics.js';

/** The images area as the area list sees it (README.md: its invariants). */
export const imagesArea = defineArea({
  name: 'images',
  config: imagesConfig,
  wiring: async () => (await import('./wiring.js')).buildImages,
  jobs: [batchImageWorkerJob],
  metrics: [ImagesMetrics],
  routes: (api, deps) => registerImageBatchRoutes(api, deps),
});

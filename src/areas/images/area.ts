import type { AreaModule } from '../../jobs/area.js';
import { batchImageWorkerJob } from './batch-image-worker.js';
import { registerImageBatchRoutes } from './image-batches-routes.js';

/** The images area as the area list sees it (README.md: its invariants). */
export const imagesArea: AreaModule = {
  name: 'images',
  jobs: [batchImageWorkerJob],
  routes: (api, deps) => registerImageBatchRoutes(api, deps),
};

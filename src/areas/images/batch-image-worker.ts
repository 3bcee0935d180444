import { jobsFor } from '../../modules/define-job.js';
import type { ImagesServices } from './wiring.js';

const defineJob = jobsFor<ImagesServices>();

/**
 * batch_image_worker: on every replica (scope `instance`). `onStart` starts the replica's queue
 * worker (claim, drive, heartbeat, delayed mover, stale-active recovery); each round is the
 * maintenance pass: stuck-batch recovery with hold release, retention of inputs and outputs,
 * and the queue and hold gauges. Enabled by default when `image.provider.base_url` is set.
 */
export const batchImageWorkerJob = defineJob({
  name: 'batch_image_worker',
  description: "Drives paid image batches through the provider's Batch API; recovers stuck batches, deletes expired inputs and outputs",
  scope: 'instance',
  defaults: (config) => ({ enabled: config.image.provider.base_url !== undefined, every: '30s', timeout: '5m', jitter: '5s' }),
  offReason: (config) => (config.image.provider.base_url === undefined ? 'off: no image provider is configured (image.provider.base_url)' : null),
  needs: ['imageBatches'],
  loops: ['batch_image_worker'],
  onStart({ imageBatches }) {
    imageBatches.worker.start();
  },
  onStop: ({ imageBatches }, by) => imageBatches.worker.stop(by),
  async run(ctx, { imageBatches }) {
    const r = await imageBatches.maintain(ctx.signal);
    return { items: r.stuck + r.inputs + r.outputs, note: `${r.stuck} stuck batches released, ${r.inputs} inputs and ${r.outputs} outputs deleted` };
  },
});

import { wired, type WiringContext } from '../../modules/wiring.js';
import { ImageBatches } from './store/image-batches.js';
import { ImageQueue } from './store/image-queue.js';
import { ImageQueueDue } from './store/image-queue-due.js';
import { BatchTransitions } from './store/image-transitions.js';
import { ImageProvider } from './image-provider.js';
import { imageObjectStore } from './image-object-store.js';
import { OrphanSweep } from './orphan-sweep.js';
import { BatchDriver } from './batch-driver.js';
import { BatchWorker } from './batch-worker.js';
import { ImageBatchService } from './image-batch-service.js';
import { ImagesMetrics } from './metrics.js';

/**
 * The image batch area: store, queue, provider client and worker. The provider's API key is
 * kept sealed with the master key in memory and opened per request, so a heap dump or a
 * logged object never shows it.
 */
export function buildImages(w: WiringContext) {
  const { config, db, clock, metrics, log, box } = w;
  const im = metrics.group(ImagesMetrics);
  const c = config.image;
  const sealed = c.provider.api_key ? box.seal(c.provider.api_key, 'image.provider.api_key') : undefined;
  const provider = c.provider.base_url
    ? new ImageProvider({
        baseUrl: c.provider.base_url,
        apiKey: () => sealed && box.open(sealed, 'image.provider.api_key'),
        timeoutMs: c.provider.request_timeout,
        downloadTimeoutMs: c.provider.download_timeout,
      })
    : null;
  // `image.storage`: fs, or an S3 bucket every replica reads and writes (docs/image-batches.md, "Storage and retention").
  const store = imageObjectStore(config);
  const batches = new ImageBatches(db);
  const queue = new ImageQueue(db, () => w.liveness?.key ?? null);
  const transitions = new BatchTransitions(db);
  const ilog = log.child({ area: 'images' });
  const driver = provider
    ? new BatchDriver(
        transitions,
        provider,
        store,
        {
          pollIntervalMs: c.poll_interval,
          retryDelayMs: c.retry_delay,
          staleTimeoutMs: c.stale_timeout,
          maxErrors: c.max_errors,
          lookupPages: c.provider.lookup_pages,
          maxImageBytes: c.max_image_bytes,
        },
        im,
        ilog,
      )
    : null;
  const nextDue = new ImageQueueDue(db);
  const worker = new BatchWorker(
    batches,
    queue,
    driver,
    {
      owner: `${config.instance.id}:${process.pid}`,
      concurrency: c.concurrency,
      leaseMs: c.lease,
      claimIntervalMs: c.claim_interval,
      retryDelayMs: c.retry_delay,
      wakes: w.wakes,
      nextDueMs: () => nextDue.inMs(),
      ticks: metrics.loopTicks,
    },
    clock,
    im,
    ilog,
  );
  w.wakes?.on('image_queue', (why) => worker.wake(why));
  const sweeper = new OrphanSweep(store, batches, clock, c.orphan_min_age);
  return wired({
    services: { imageBatches: new ImageBatchService(batches, queue, transitions, worker, provider, store, c, im, ilog, sweeper, clock) },
    rungs: [{ name: 'image object store', phase: 'connections', stop: () => store.close() }],
  });
}

/** What the images area's job and routes use. */
export type ImagesServices = ReturnType<typeof buildImages>['services'];

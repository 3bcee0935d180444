import { Counter, Gauge, type Registry } from 'prom-client';

/** batch_image_worker: the queue, leases, provider errors and the money (the seed's ops checks). */
export class ImagesMetrics {
  readonly queue: Gauge<'status'>;
  readonly leasesLost: Counter;
  readonly staleRecovered: Counter;
  readonly stuckFailed: Counter;
  readonly providerErrors: Counter<'kind'>;
  readonly creates: Counter;
  readonly holdsOpen: Gauge;
  readonly holdsOpenAmount: Gauge;
  readonly settled: Counter<'step'>;
  readonly settledAmount: Counter<'step'>;
  readonly steps: Counter<'outcome'>;
  readonly storeErrors: Counter<'op'>;
  readonly objectsDeleted: Counter<'reason'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.queue = new Gauge({ name: 'relay_jobs_image_queue_batches', help: 'Image batches in the queue by status (ready, delayed, active)', labelNames: ['status'], registers });
    this.leasesLost = new Counter({ name: 'relay_jobs_image_leases_lost_total', help: 'Batch leases this replica lost while driving a batch', registers });
    this.staleRecovered = new Counter({ name: 'relay_jobs_image_stale_recovered_total', help: 'Active batches whose lease ran out, handed back to ready', registers });
    this.stuckFailed = new Counter({ name: 'relay_jobs_image_stuck_failed_total', help: 'Batches stuck before submission, failed and released by recovery', registers });
    this.providerErrors = new Counter({
      name: 'relay_jobs_image_provider_errors_total',
      help: 'Image provider calls that failed, by class (timeout, network, http_5xx, http_429, http_4xx, malformed)',
      labelNames: ['kind'],
      registers,
    });
    this.creates = new Counter({ name: 'relay_jobs_image_provider_creates_total', help: 'Batch creates sent to the image provider', registers });
    this.holdsOpen = new Gauge({ name: 'relay_jobs_image_holds_open', help: 'Image batch holds neither captured nor released', registers });
    this.holdsOpenAmount = new Gauge({ name: 'relay_jobs_image_holds_open_minor_units', help: 'Total of the open image batch holds, in minor units', registers });
    this.settled = new Counter({ name: 'relay_jobs_image_settlements_total', help: 'Holds settled by this replica, by step (capture, release)', labelNames: ['step'], registers });
    this.settledAmount = new Counter({
      name: 'relay_jobs_image_settled_minor_units_total',
      help: 'Amounts settled by this replica, by step (capture, refund of the uncaptured rest, release)',
      labelNames: ['step'],
      registers,
    });
    this.steps = new Counter({ name: 'relay_jobs_image_steps_total', help: 'Batch steps driven by this replica, by outcome (again, later, done, error)', labelNames: ['outcome'], registers });
    this.storeErrors = new Counter({
      name: 'relay_jobs_image_store_errors_total',
      help: 'Object store (image.storage) operations that failed, by operation (step: a batch step retried; serve: an image request answered 503; retention; sweep)',
      labelNames: ['op'],
      registers,
    });
    this.objectsDeleted = new Counter({
      name: 'relay_jobs_image_objects_deleted_total',
      help: 'Image store objects deleted by this replica, by reason (orphan: the sweep; retention deletes whole batches and is counted by batches)',
      labelNames: ['reason'],
      registers,
    });
  }
}

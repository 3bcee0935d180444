import type { Config } from '../../config/load.js';
import type { Logger } from '../../telemetry/logger.js';
import type { ImagesMetrics } from './metrics.js';
import { TERMINAL, type ImageBatches, type SubmitResult } from './store/image-batches.js';
import type { ImageQueue } from './store/image-queue.js';
import type { BatchTransitions } from './store/image-transitions.js';
import type { ImageProvider } from './image-provider.js';
import { ObjectStoreUnavailable, type ObjectStore } from './object-store.js';
import type { OrphanSweep } from './orphan-sweep.js';
import type { Readable } from 'node:stream';
import type { Clock } from '../../time/clock.js';
import { requestHash } from '../usage/index.js';
import { objectPrefix } from './batch-indexer.js';
import { AppError, type ErrorKind } from '../../errors/app-error.js';
import type { BatchWorker } from './batch-worker.js';

/** Claims of a batch still before submission after which recovery gives up on it. */
const STUCK_AFTER_CLAIMS = 50;

export interface SubmitRequest {
  user_id: number;
  model: string;
  prompts: string[];
  size: string;
  n: number;
}

/** A submit the service refuses before anything is held; `field` names the offending input. */
export class SubmitRejected extends AppError {
  constructor(
    kind: Extract<ErrorKind, 'invalid' | 'payment_required' | 'not_found' | 'conflict' | 'unavailable'>,
    code: string,
    message: string,
    readonly field: string | null = null,
    detail?: Record<string, unknown>,
  ) {
    super(kind, code, message, field ? [{ field, message }] : undefined, detail);
  }
}

/**
 * The image batch API's domain side: price and validate a submit, hold and enqueue it in one
 * transaction, ask for a cancel, read batches, and the maintenance pass (stuck-batch recovery,
 * retention, gauges) that batch_image_worker's rounds run.
 */
export class ImageBatchService {
  constructor(
    readonly batches: ImageBatches,
    readonly queue: ImageQueue,
    private readonly transitions: BatchTransitions,
    readonly worker: BatchWorker,
    private readonly provider: ImageProvider | null,
    readonly store: ObjectStore,
    private readonly image: Config['image'],
    private readonly metrics: ImagesMetrics,
    private readonly log: Logger,
    private readonly sweeper: OrphanSweep,
    private readonly clock: Clock,
  ) {}

  /** When this replica next sweeps orphans (the first round after start sweeps). */
  private nextSweepAt = 0;

  /** The price per image of a model in minor units, or null when the model has none configured. */
  price(model: string): number | null {
    return Object.hasOwn(this.image.prices, model) ? this.image.prices[model]! : null;
  }

  async submit(key: string, req: SubmitRequest): Promise<Exclude<SubmitResult, { kind: 'conflict' | 'insufficient' | 'no_user' }>> {
    if (!this.provider) throw new SubmitRejected('unavailable', 'not_configured', 'image batches are not configured: set image.provider.base_url');
    const price = this.price(req.model);
    if (price === null)
      throw new SubmitRejected(
        'invalid',
        'invalid',
        `model ${JSON.stringify(req.model)} has no price; configured models: ${Object.keys(this.image.prices).join(', ') || '(none; set image.prices.<model>)'}`,
        'model',
      );
    if (req.prompts.length * req.n * price > Number.MAX_SAFE_INTEGER) throw new SubmitRejected('invalid', 'invalid', 'the batch total is too large', 'prompts');
    const r = await this.batches.submit({
      userId: req.user_id,
      idempotencyKey: key,
      requestHash: requestHash(req),
      model: req.model,
      size: req.size,
      n: req.n,
      prompts: req.prompts,
      pricePerImage: price,
    });
    if (r.kind === 'conflict')
      throw new SubmitRejected(
        'conflict',
        'idempotency_conflict',
        `Idempotency-Key ${JSON.stringify(key)} was first used with a different request body; use a new key for a new batch`,
        'Idempotency-Key',
      );
    if (r.kind === 'no_user') throw new SubmitRejected('not_found', 'not_found', `no user ${req.user_id}`, 'user_id');
    if (r.kind === 'insufficient') {
      const total = req.prompts.length * req.n * price;
      throw new SubmitRejected(
        'payment_required',
        'insufficient_balance',
        `the batch costs ${total} (${req.prompts.length * req.n} images × ${price}); the balance is ${r.balance}, short by ${r.shortfall}`,
        'user_id',
        { required: total, balance: r.balance, shortfall: r.shortfall },
      );
    }
    if (r.kind === 'created') this.log.info({ batch: r.batch.id, user: req.user_id, hold: r.batch.hold_amount }, 'image batch accepted; hold placed');
    return r;
  }

  /** Marks the batch for cancelling and wakes it; the worker cancels at the provider and settles. */
  async cancel(id: number): Promise<'requested' | 'terminal' | 'not_found'> {
    const b = await this.batches.get(id);
    if (!b) return 'not_found';
    if (TERMINAL.includes(b.state)) return 'terminal';
    if (!(await this.transitions.move(null, id, b.state, b.state, { cancel_requested: true }, 'cancel requested'))) return this.cancel(id);
    await this.queue.wake(id);
    return 'requested';
  }

  /** One maintenance pass: recovery of stuck batches, retention, and the gauges. */
  async maintain(signal?: AbortSignal): Promise<{ stuck: number; inputs: number; outputs: number }> {
    await this.queue.moveDue();
    const stale = await this.queue.recoverStale();
    if (stale) this.metrics.staleRecovered.inc(stale);
    const stuck = await this.transitions.failStuck(this.image.stale_timeout, STUCK_AFTER_CLAIMS, 100);
    if (stuck.length) {
      this.metrics.stuckFailed.inc(stuck.length);
      this.log.warn({ batches: stuck }, 'image batches stuck before submission failed; holds released');
    }
    const due = await this.transitions.retentionDue(this.image.input_retention, this.image.output_retention, 100);
    // Claim first, delete after: whichever replica's conditional write wins deletes, once. A delete
    // that fails after its claim leaves objects no batch references, which the orphan sweep collects.
    let inputs = 0;
    for (const b of due.inputs) {
      signal?.throwIfAborted();
      if (!(await this.transitions.claimInputDeletion(b.id))) continue;
      inputs++;
      await this.retentionDelete(b.id, `${objectPrefix(b.id)}input.jsonl`);
      if (b.input_file_id && this.provider)
        await this.provider.deleteFile(b.input_file_id).catch((err: Error) => this.log.warn({ batch: b.id, err: err.message }, 'could not delete the input file at the provider'));
    }
    let outputs = 0;
    for (const b of due.outputs) {
      signal?.throwIfAborted();
      const moved = await this.transitions.move(null, b.id, ['completed', 'failed', 'cancelled'], 'output_deleted', { inputs_deleted_at: 'now' }, 'retention: outputs deleted');
      if (!moved) continue;
      outputs++;
      await this.retentionDelete(b.id, objectPrefix(b.id));
    }
    await this.sweepIfDue(signal);
    const [counts, holds] = await Promise.all([this.queue.counts(), this.batches.openHolds()]);
    for (const [status, n] of Object.entries(counts)) this.metrics.queue.set({ status }, n);
    this.metrics.holdsOpen.set(holds.count);
    this.metrics.holdsOpenAmount.set(holds.amount);
    return { stuck: stuck.length, inputs, outputs };
  }

  private async retentionDelete(batch: number, prefix: string): Promise<void> {
    try {
      await this.store.deletePrefix(prefix);
    } catch (err) {
      if (!(err instanceof ObjectStoreUnavailable)) throw err;
      this.metrics.storeErrors.inc({ op: 'retention' });
      this.log.warn({ batch, err: err.message }, 'retention could not delete image objects; the orphan sweep deletes them later');
    }
  }

  /** The orphan sweep, at most once per `image.orphan_sweep_interval` on this replica; a failed sweep is tried again sooner. */
  private async sweepIfDue(signal?: AbortSignal): Promise<void> {
    const now = this.clock.now();
    if (now < this.nextSweepAt) return;
    this.nextSweepAt = now + this.image.orphan_sweep_interval;
    try {
      const r = await this.sweeper.run(signal);
      if (r.deleted) {
        this.metrics.objectsDeleted.inc({ reason: 'orphan' }, r.deleted);
        this.log.info({ seen: r.seen, deleted: r.deleted }, 'image store orphan sweep deleted objects no batch references');
      }
    } catch (err) {
      if (!(err instanceof ObjectStoreUnavailable)) throw err;
      this.nextSweepAt = now + Math.min(this.image.orphan_sweep_interval, 600_000);
      this.metrics.storeErrors.inc({ op: 'sweep' });
      this.log.warn({ err: err.message }, 'image store orphan sweep failed; tried again later');
    }
  }

  /**
   * One stored image as a stream (never read whole), or null when the batch, the prompt or the
   * image does not exist or retention deleted it. A store that cannot be reached is a 503 naming
   * it: the image is not lost, and a 404 would say it was.
   */
  async openImage(id: number, idx: number, k: number): Promise<{ stream: Readable; size: number } | null> {
    const b = await this.batches.get(id);
    if (!b || b.state === 'output_deleted') return null;
    const r = (await this.batches.results(id)).find((x) => x.idx === idx);
    const key = r?.object_keys[k];
    if (!key) return null;
    try {
      return await this.store.open(key);
    } catch (err) {
      if (!(err instanceof ObjectStoreUnavailable)) throw err;
      this.metrics.storeErrors.inc({ op: 'serve' });
      throw new ObjectStoreUnavailable(`${err.message}; the image is kept, try again once the store answers`);
    }
  }
}

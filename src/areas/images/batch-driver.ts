import type { Logger } from '../../telemetry/logger.js';
import type { ImagesMetrics } from './metrics.js';
import type { ImageBatch, BatchState } from './store/image-batches.js';
import type { BatchLease } from './store/image-queue.js';
import type { BatchTransitions } from './store/image-transitions.js';
import { ImageProviderError, type ImageProvider, type ProviderBatch } from './image-provider.js';
import { ObjectStoreUnavailable, type ObjectStore } from './object-store.js';
import { indexOutputs, inputJsonl, maxLineBytes, objectPrefix } from './batch-indexer.js';

/** `again` may carry the row as the step's own write returned it, so the next step need not read it again. */
export type StepOutcome = { kind: 'again'; batch?: ImageBatch } | { kind: 'later'; delayMs: number } | { kind: 'done' };

export interface DriverOptions {
  pollIntervalMs: number;
  retryDelayMs: number;
  staleTimeoutMs: number;
  maxErrors: number;
  lookupPages: number;
  /** `image.max_image_bytes`: one decoded image; bounds the output line read into memory. */
  maxImageBytes: number;
}

const ACTIVE_AT_PROVIDER = new Set(['validating', 'in_progress', 'finalizing', 'cancelling']);

/**
 * One step of one batch, by its state:
 *
 *   created ─▶ uploading ─▶ submitted ─▶ running ─▶ indexing ─▶ settling ─▶ completed
 *                  │             │           │                     └─▶ cancelled (cancel asked, some images) / failed (none)
 *                  └─────────────┴───────────┴─▶ failed | cancelled   (hold released)
 *
 * Every write goes through BatchTransitions with the worker's lease, so only the fence holder
 * moves a batch, and only from the state it read. Never submitted twice: `create_sent_at` is
 * committed before the create is sent; a batch that has it and no provider id is looked up at
 * the provider by the id in its metadata, never created again (unless the provider certainly
 * refused the create: a 4xx/429 reply). Not found after `staleTimeoutMs`: failed and released.
 */
export class BatchDriver {
  constructor(
    private readonly t: BatchTransitions,
    private readonly provider: ImageProvider,
    private readonly store: ObjectStore,
    private readonly o: DriverOptions,
    private readonly metrics: ImagesMetrics,
    private readonly log: Logger,
  ) {}

  async step(l: BatchLease, b: ImageBatch, nowMs: number): Promise<StepOutcome> {
    try {
      return await this.stepUnguarded(l, b, nowMs);
    } catch (err) {
      if (err instanceof ObjectStoreUnavailable) {
        this.metrics.storeErrors.inc({ op: 'step' });
        return this.storeFailed(l, b, err);
      }
      if (!(err instanceof ImageProviderError)) throw err;
      this.metrics.providerErrors.inc({ kind: err.kind });
      return this.providerFailed(l, b, err);
    }
  }

  /**
   * The object store is out of reach (writing the input, or an image while indexing). Nothing is
   * settled: the hold stays, the batch keeps its state and is retried after `retryDelayMs` with
   * the reason on the batch, as for a provider error; indexing again rewrites the same keys. After
   * `maxErrors` consecutive failures it fails and the whole hold is released: nobody pays for
   * images that could not be stored (invariant 5: the hold is settled once, by that release).
   */
  private async storeFailed(l: BatchLease, b: ImageBatch, err: ObjectStoreUnavailable): Promise<StepOutcome> {
    const errors = b.errors + 1;
    const reason = `object store unavailable: ${err.message}`;
    if (errors >= this.o.maxErrors) return this.end(l, b, 'failed', `gave up after ${errors} errors; last: ${reason}`);
    this.log.warn({ batch: b.id, state: b.state, errors, retry_in_ms: this.o.retryDelayMs, err: err.message }, 'image store unavailable; batch retried later, hold kept');
    const moved = await this.t.move(l, b.id, b.state, b.state, { errors, reason: `${reason}; retrying, hold kept` });
    return moved ? { kind: 'later', delayMs: this.o.retryDelayMs } : { kind: 'done' };
  }

  private async providerFailed(l: BatchLease, b: ImageBatch, err: ImageProviderError): Promise<StepOutcome> {
    const errors = b.errors + 1;
    const delayMs = err.retryAfterMs ?? this.o.retryDelayMs;
    if (errors >= this.o.maxErrors) return this.end(l, b, 'failed', `gave up after ${errors} provider errors; last: ${err.message}`);
    this.log.warn({ batch: b.id, state: b.state, kind: err.kind, errors, retry_in_ms: delayMs }, 'image provider call failed; retrying later');
    const moved = await this.t.move(l, b.id, b.state, b.state, { errors, reason: err.message });
    return moved ? { kind: 'later', delayMs } : { kind: 'done' };
  }

  private async stepUnguarded(l: BatchLease, b: ImageBatch, nowMs: number): Promise<StepOutcome> {
    switch (b.state) {
      case 'created':
        if (b.cancel_requested) return this.end(l, b, 'cancelled', 'cancelled before upload');
        return this.next(await this.t.move(l, b.id, 'created', 'uploading'));
      case 'uploading':
        return this.upload(l, b, nowMs);
      case 'submitted':
      case 'running':
        return this.poll(l, b);
      case 'indexing': {
        // Streamed, one line at a time: an output file can be several GB (never read whole).
        const files = [b.output_file_id, b.error_file_id].filter((f): f is string => Boolean(f)).map((f) => () => this.provider.contentStream(f));
        const results = await indexOutputs(b, files, this.store, maxLineBytes(b.n, this.o.maxImageBytes));
        if (!(await this.t.saveResults(l, b.id, results))) return { kind: 'done' };
        const ok = results.filter((r) => r.status === 'succeeded');
        const images = ok.reduce((s, r) => s + r.images, 0);
        return this.next(await this.t.move(l, b.id, 'indexing', 'settling', { succeeded: images, failed: b.image_count - images, errors: 0 }, `${images} of ${b.image_count} images`));
      }
      case 'settling':
        return this.settle(l, b);
      default:
        return { kind: 'done' };
    }
  }

  private async upload(l: BatchLease, b: ImageBatch, nowMs: number): Promise<StepOutcome> {
    if (b.create_sent_at) {
      // A create may have reached the provider: find it by our id before anything else.
      const found = await this.provider.findByOurId(b.id, this.o.lookupPages);
      if (found) {
        this.log.info({ batch: b.id, provider_batch_id: found.id }, 'found the provider batch of an unanswered create');
        return this.submitted(l, b, found);
      }
      if (b.cancel_requested) return this.end(l, b, 'cancelled', 'cancelled; the provider has no batch for it');
      if (nowMs - Date.parse(b.create_sent_at) > this.o.staleTimeoutMs)
        return this.end(l, b, 'failed', `create sent at ${b.create_sent_at} but the provider has no such batch after the stale timeout`);
      return { kind: 'later', delayMs: Math.min(this.o.retryDelayMs, this.o.pollIntervalMs) };
    }
    if (b.cancel_requested) return this.end(l, b, 'cancelled', 'cancelled before submission');
    let fileId = b.input_file_id;
    if (!fileId) {
      const jsonl = inputJsonl(b);
      await this.store.put(`${objectPrefix(b.id)}input.jsonl`, jsonl);
      try {
        fileId = await this.provider.upload(`relay-batch-${b.id}.jsonl`, jsonl);
      } catch (err) {
        // The provider refuses our input for good (4xx, not 429): retrying changes nothing.
        if (err instanceof ImageProviderError && err.kind === 'http_4xx') return this.end(l, b, 'failed', `provider refused the input: ${err.message}`);
        throw err;
      }
      if (!(await this.t.move(l, b.id, 'uploading', 'uploading', { input_file_id: fileId }))) return { kind: 'done' };
    }
    // Committed before the create is sent (invariant: never submitted twice).
    const marked = await this.t.move(l, b.id, 'uploading', 'uploading', { create_sent_at: 'now' });
    if (!marked || marked.cancel_requested) return marked ? { kind: 'again' } : { kind: 'done' };
    this.metrics.creates.inc();
    let created: ProviderBatch;
    try {
      created = await this.provider.create(fileId, b.id);
    } catch (err) {
      // Only a definite refusal OF THE CREATE (4xx/429: the provider did not act) allows sending it
      // again; an error of any other call, or an ambiguous one, leaves create_sent_at for the lookup.
      if (err instanceof ImageProviderError && err.definite) {
        if (err.kind === 'http_4xx') return this.end(l, b, 'failed', `provider refused the batch: ${err.message}`);
        if (!(await this.t.move(l, b.id, 'uploading', 'uploading', { create_sent_at: null }))) return { kind: 'done' };
      }
      throw err;
    }
    return this.submitted(l, b, created);
  }

  private async submitted(l: BatchLease, b: ImageBatch, pb: ProviderBatch): Promise<StepOutcome> {
    return this.next(await this.t.move(l, b.id, 'uploading', 'submitted', { provider_batch_id: pb.id, provider_status: pb.status, errors: 0 }, `provider batch ${pb.id}`));
  }

  private async poll(l: BatchLease, b: ImageBatch): Promise<StepOutcome> {
    let pb: ProviderBatch;
    if (b.cancel_requested && b.provider_status !== 'cancelling' && b.provider_status !== 'cancelled' && ACTIVE_AT_PROVIDER.has(b.provider_status ?? 'validating'))
      pb = await this.provider.cancel(b.provider_batch_id!);
    else pb = await this.provider.get(b.provider_batch_id!);
    if (ACTIVE_AT_PROVIDER.has(pb.status)) {
      const moved = await this.t.move(l, b.id, b.state, 'running', { provider_status: pb.status, errors: 0 });
      return moved ? { kind: 'later', delayMs: this.o.pollIntervalMs } : { kind: 'done' };
    }
    if (pb.status === 'completed' || ((pb.status === 'expired' || pb.status === 'cancelled') && pb.output_file_id)) {
      return this.next(
        await this.t.move(
          l,
          b.id,
          b.state,
          'indexing',
          { provider_status: pb.status, output_file_id: pb.output_file_id ?? null, error_file_id: pb.error_file_id ?? null, errors: 0 },
          `provider ${pb.status}`,
        ),
      );
    }
    return this.end(l, b, b.cancel_requested || pb.status === 'cancelled' ? 'cancelled' : 'failed', `provider batch ${pb.status} with no output`);
  }

  private async settle(l: BatchLease, b: ImageBatch): Promise<StepOutcome> {
    if (b.succeeded === 0) return this.end(l, b, b.cancel_requested ? 'cancelled' : 'failed', 'no image succeeded');
    const cost = b.succeeded * b.price_per_image;
    const done = await this.t.finish(
      l,
      b.id,
      ['settling'],
      b.cancel_requested ? 'cancelled' : 'completed',
      { step: 'capture', cost },
      `${b.succeeded} of ${b.image_count} images × ${b.price_per_image}`,
    );
    if (done) {
      this.metrics.settled.inc({ step: 'capture' });
      this.metrics.settledAmount.inc({ step: 'capture' }, cost);
      this.metrics.settledAmount.inc({ step: 'refund' }, b.hold_amount - cost);
    }
    return { kind: 'done' };
  }

  /** A terminal state with the whole hold released. */
  private async end(l: BatchLease, b: ImageBatch, to: 'failed' | 'cancelled', reason: string): Promise<StepOutcome> {
    const done = await this.t.finish(l, b.id, [b.state as BatchState], to, { step: 'release' }, reason);
    if (done) {
      this.metrics.settled.inc({ step: 'release' });
      this.metrics.settledAmount.inc({ step: 'release' }, b.hold_amount);
      this.log.info({ batch: b.id, state: to, reason }, 'image batch ended; hold released');
    }
    return { kind: 'done' };
  }

  private next(moved: ImageBatch | null): StepOutcome {
    return moved ? { kind: 'again', batch: moved } : { kind: 'done' };
  }
}

import { z } from 'zod';
import { systemClock } from '../../time/clock.js';
import { failureText } from '../../upstream/error-text.js';
import { JSON_REPLY_LIMIT, ReplyTooLarge, readReplyText } from '../../upstream/reply-limit.js';

export type ProviderErrorClass = 'timeout' | 'network' | 'http_5xx' | 'http_429' | 'http_4xx' | 'malformed';

/**
 * A call to the image provider that did not give a usable answer. `definite` is true when the
 * provider certainly did not act on the request (a 4xx or 429 reply); a timeout, a network
 * error, a 5xx or an unreadable body leave it unknown whether a create took effect.
 */
export class ImageProviderError extends Error {
  constructor(
    readonly kind: ProviderErrorClass,
    message: string,
    readonly retryAfterMs: number | null = null,
  ) {
    super(`image provider: ${message}`);
    this.name = 'ImageProviderError';
  }
  get definite(): boolean {
    return this.kind === 'http_429' || this.kind === 'http_4xx';
  }
}

export const PROVIDER_STATUSES = ['validating', 'in_progress', 'finalizing', 'completed', 'failed', 'expired', 'cancelling', 'cancelled'] as const;
const batchSchema = z.object({
  id: z.string().min(1),
  status: z.enum(PROVIDER_STATUSES),
  output_file_id: z.string().nullish(),
  error_file_id: z.string().nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
  request_counts: z.object({ total: z.number(), completed: z.number(), failed: z.number() }).partial().nullish(),
});
export type ProviderBatch = z.infer<typeof batchSchema>;
const listSchema = z.object({ data: z.array(batchSchema), has_more: z.boolean().optional(), last_id: z.string().nullish() });
const fileSchema = z.object({ id: z.string().min(1) });

export interface ImageProviderOptions {
  baseUrl: string;
  apiKey: () => string | undefined;
  timeoutMs: number;
  /** Bound on downloading one output file (default: 20 × timeoutMs). */
  downloadTimeoutMs?: number;
}

/** The metadata key that carries our batch id, so a lost create reply can be found again. */
export const BATCH_ID_KEY = 'relay_batch_id';

/**
 * OpenAI's Batch API, the parts a batch of image generations needs: upload the JSONL input,
 * create, look up by our id, poll, download output/error files, cancel, delete a file. Every
 * reply is validated; anything unexpected is an ImageProviderError naming what was wrong.
 */
export class ImageProvider {
  constructor(private readonly o: ImageProviderOptions) {}

  /** Sends one request; a reply that is not 2xx is an ImageProviderError. The caller reads the body (capped or streamed). */
  private async send(method: string, path: string, body?: BodyInit, contentType?: string, timeoutMs = this.o.timeoutMs): Promise<Response> {
    const key = this.o.apiKey();
    const url = `${this.o.baseUrl.replace(/\/$/, '')}${path}`;
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers: { accept: 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...(contentType ? { 'content-type': contentType } : {}) },
        body,
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      const e = err as Error;
      if (e.name === 'TimeoutError') throw new ImageProviderError('timeout', `no answer to ${method} ${path} within ${timeoutMs}ms`);
      throw new ImageProviderError('network', `${method} ${path}: unreachable (${failureText(err, [url, this.o.baseUrl], 200)})`);
    }
    if (res.status < 400) return res;
    const text = await this.text(res, method, path).catch(() => '');
    if (res.status === 429) throw new ImageProviderError('http_429', `${method} ${path}: rate limited (429)`, retryAfter(res.headers.get('retry-after')));
    if (res.status >= 500) throw new ImageProviderError('http_5xx', `${method} ${path}: HTTP ${res.status}`);
    throw new ImageProviderError('http_4xx', `${method} ${path}: HTTP ${res.status}: ${text.slice(0, 200)}`);
  }

  private async text(res: Response, method: string, path: string): Promise<string> {
    try {
      return await readReplyText(res, JSON_REPLY_LIMIT, `${method} ${path}`);
    } catch (err) {
      // Too large is as unreadable as garbage: the call's effect is unknown, retried like a malformed reply.
      if (err instanceof ReplyTooLarge) throw new ImageProviderError('malformed', err.message);
      throw new ImageProviderError('network', `${method} ${path}: reply cut off (${failureText(err, [this.o.baseUrl], 200)})`);
    }
  }

  private async call(method: string, path: string, body?: BodyInit, contentType?: string): Promise<{ status: number; text: string }> {
    const res = await this.send(method, path, body, contentType);
    return { status: res.status, text: await this.text(res, method, path) };
  }

  private async json<S extends z.ZodType>(schema: S, method: string, path: string, body?: BodyInit, contentType?: string): Promise<z.infer<S>> {
    const { text } = await this.call(method, path, body, contentType);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new ImageProviderError('malformed', `${method} ${path}: the reply is not JSON`);
    }
    const r = schema.safeParse(parsed);
    if (!r.success) throw new ImageProviderError('malformed', `${method} ${path}: unexpected reply (${r.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')})`);
    return r.data;
  }

  /** Uploads the JSONL input (purpose `batch`); returns the file id. */
  async upload(filename: string, jsonl: string): Promise<string> {
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([jsonl], { type: 'application/jsonl' }), filename);
    return (await this.json(fileSchema, 'POST', '/files', form)).id;
  }

  async create(inputFileId: string, ourId: number): Promise<ProviderBatch> {
    const body = JSON.stringify({ input_file_id: inputFileId, endpoint: '/v1/images/generations', completion_window: '24h', metadata: { [BATCH_ID_KEY]: String(ourId) } });
    return this.json(batchSchema, 'POST', '/batches', body, 'application/json');
  }

  /** Pages through the provider's batches for the one whose metadata carries our id. */
  async findByOurId(ourId: number, maxPages: number): Promise<ProviderBatch | null> {
    let after: string | null = null;
    for (let page = 0; page < maxPages; page++) {
      const list: z.infer<typeof listSchema> = await this.json(listSchema, 'GET', `/batches?limit=100${after ? `&after=${encodeURIComponent(after)}` : ''}`);
      const hit = list.data.find((b) => b.metadata?.[BATCH_ID_KEY] === String(ourId));
      if (hit) return hit;
      if (!list.has_more || list.data.length === 0) return null;
      after = list.last_id ?? list.data[list.data.length - 1]!.id;
    }
    return null;
  }

  get(providerBatchId: string): Promise<ProviderBatch> {
    return this.json(batchSchema, 'GET', `/batches/${encodeURIComponent(providerBatchId)}`);
  }

  cancel(providerBatchId: string): Promise<ProviderBatch> {
    return this.json(batchSchema, 'POST', `/batches/${encodeURIComponent(providerBatchId)}/cancel`);
  }

  /**
   * An output or error file as a byte stream, never read whole (it can be several GB). The
   * timeout covers the whole download, so it is `downloadTimeoutMs`, not the request timeout.
   */
  async contentStream(fileId: string): Promise<AsyncIterable<Uint8Array>> {
    const path = `/files/${encodeURIComponent(fileId)}/content`;
    const res = await this.send('GET', path, undefined, undefined, this.o.downloadTimeoutMs ?? this.o.timeoutMs * 20);
    const body = res.body;
    if (!body) return (async function* () {})();
    const baseUrl = this.o.baseUrl;
    return (async function* () {
      try {
        for await (const chunk of body) yield chunk;
      } catch (err) {
        throw new ImageProviderError('network', `GET ${path}: download cut off (${failureText(err, [baseUrl], 200)})`);
      }
    })();
  }

  async deleteFile(fileId: string): Promise<void> {
    await this.call('DELETE', `/files/${encodeURIComponent(fileId)}`);
  }
}

function retryAfter(v: string | null): number | null {
  if (!v) return null;
  const s = Number(v);
  if (Number.isFinite(s) && s >= 0) return Math.min(s * 1000, 3_600_000);
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : Math.max(0, Math.min(t - systemClock.now(), 3_600_000));
}

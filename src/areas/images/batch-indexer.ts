import type { ObjectStore } from './object-store.js';
import type { ImageBatch } from './store/image-batches.js';
import { lines } from '../../upstream/reply-limit.js';
export { maxLineBytes } from './image-limits.js';

export interface PromptResult {
  idx: number;
  status: 'succeeded' | 'failed';
  images: number;
  objectKeys: string[];
  error: string | null;
}

/** The custom_id of prompt `idx` of batch `id`: the provider echoes it on every output line. */
export const customId = (id: number, idx: number) => `b${id}-p${idx}`;

/** The JSONL input: one `/v1/images/generations` request per prompt. */
export function inputJsonl(b: ImageBatch): string {
  return (
    b.prompts
      .map((prompt, idx) =>
        JSON.stringify({ custom_id: customId(b.id, idx), method: 'POST', url: '/v1/images/generations', body: { model: b.model, prompt, n: b.n, size: b.size, response_format: 'b64_json' } }),
      )
      .join('\n') + '\n'
  );
}

/** Every object of the area lives under this prefix (the orphan sweep walks it). */
export const OBJECTS_ROOT = 'image-batches/';
export const objectPrefix = (id: number) => `${OBJECTS_ROOT}${id}/`;

/**
 * Reads the provider's output and error files, as streams, line by line into one result per
 * prompt, and writes the images to the object store under deterministic keys (a second indexing
 * after a crash overwrites the same objects). Only one line is held at a time, so a file of any
 * size is indexed in memory bounded by `maxLine` (invariant: output files are never read whole).
 * A line we cannot read, one longer than `maxLine`, a custom_id that is not ours, or an image
 * that is not base64 never fails the batch: that prompt just does not count as succeeded, and
 * nobody pays for it.
 */
export async function indexOutputs(b: ImageBatch, files: Array<() => Promise<AsyncIterable<Uint8Array>>>, store: ObjectStore, maxLine: number): Promise<PromptResult[]> {
  const results: PromptResult[] = b.prompts.map((_, idx) => ({ idx, status: 'failed', images: 0, objectKeys: [], error: 'no result from the provider' }));
  for (const open of files) {
    for await (const line of lines(await open(), maxLine)) {
      if (!Buffer.isBuffer(line)) continue; // longer than any reply to this batch can be: unreadable, like garbage
      await indexLine(b, line, results, store);
    }
  }
  return results;
}

async function indexLine(b: ImageBatch, line: Buffer, results: PromptResult[], store: ObjectStore): Promise<void> {
  let rec: { custom_id?: unknown; response?: { status_code?: unknown; body?: { data?: unknown } } | null; error?: { message?: unknown } | null };
  try {
    rec = JSON.parse(line.toString('utf8')) as typeof rec;
  } catch {
    return;
  }
  const m = typeof rec?.custom_id === 'string' ? /^b(\d+)-p(\d+)$/.exec(rec.custom_id) : null;
  if (!m || Number(m[1]) !== b.id) return;
  const r = results[Number(m[2])];
  if (!r || r.status === 'succeeded') return;
  const data = rec.response?.status_code === 200 && Array.isArray(rec.response.body?.data) ? (rec.response.body.data as Array<{ b64_json?: unknown }>) : null;
  if (!data) {
    r.error = typeof rec.error?.message === 'string' ? rec.error.message.slice(0, 500) : `provider answered ${String(rec.response?.status_code ?? 'an error')}`;
    return;
  }
  const keys: string[] = [];
  for (const item of data.slice(0, b.n)) {
    if (typeof item?.b64_json !== 'string' || !/^[A-Za-z0-9+/]+={0,2}$/.test(item.b64_json)) continue;
    const key = `${objectPrefix(b.id)}p${r.idx}-${keys.length}.png`;
    await store.put(key, Buffer.from(item.b64_json, 'base64'));
    keys.push(key);
  }
  if (keys.length) Object.assign(r, { status: 'succeeded', images: keys.length, objectKeys: keys, error: keys.length < b.n ? `${b.n - keys.length} of ${b.n} images missing` : null });
  else r.error = 'the reply carried no base64 image';
}

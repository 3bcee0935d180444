import { createHash } from 'node:crypto';
import { Transform, Writable, type TransformCallback } from 'node:stream';

/** Passes bytes through while taking their SHA-256 and counting them: the checksum is over exactly the stored bytes. */
export class HashCounter extends Transform {
  private readonly hash = createHash('sha256');
  bytes = 0;
  private digest: string | null = null;

  constructor(private readonly onBytes?: (total: number) => void) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.hash.update(chunk);
    this.bytes += chunk.length;
    this.onBytes?.(this.bytes);
    cb(null, chunk);
  }

  get hex(): string {
    this.digest ??= this.hash.digest('hex');
    return this.digest;
  }
}

/** Reads a stream to the end and keeps nothing. */
export function sink(): Writable {
  return new Writable({ write: (_c, _e, cb) => cb() });
}

/** Every settled promise; the first rejection (in argument order) is thrown once all have settled. */
export async function allSettledOrThrow(promises: Array<Promise<unknown>>): Promise<void> {
  const results = await Promise.allSettled(promises);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
}

export function oneLine(err: unknown): string {
  return ((err as Error)?.message ?? String(err)).split('\n')[0]!.slice(0, 500);
}

/**
 * Every provider reply is read with a limit: a reply larger than the client expects is an error
 * naming the call and the limit, read no further (the connection is dropped), never an OOM. The
 * one exception is an image batch's output file, which is streamed line by line (`lines()`).
 */
export class ReplyTooLarge extends Error {
  constructor(
    readonly what: string,
    readonly limit: number,
  ) {
    super(`${what}: the reply is larger than ${limit} bytes; read no further`);
    this.name = 'ReplyTooLarge';
  }
}

/** Default caps: JSON control replies are small; 1 MiB leaves a hundredfold margin. */
export const JSON_REPLY_LIMIT = 1024 * 1024;

/** The body of a fetch `Response` as text, at most `limit` bytes (a `content-length` over it is refused before reading). */
export interface ReplyLike {
  headers: { get(name: string): string | null };
  body: ReadableStream<Uint8Array> | null;
}

export async function readReplyText(res: ReplyLike, limit: number, what: string): Promise<string> {
  const declared = Number(res.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > limit) {
    await res.body?.cancel().catch(() => undefined);
    throw new ReplyTooLarge(what, limit);
  }
  if (!res.body) return '';
  const parts: Uint8Array[] = [];
  let size = 0;
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => undefined);
      throw new ReplyTooLarge(what, limit);
    }
    parts.push(value);
  }
  return Buffer.concat(parts).toString('utf8');
}

/** Reads an undici body (an async iterable of chunks) up to `limit` bytes; beyond it, stops reading and destroys the stream. */
export async function readCappedChunks(body: AsyncIterable<Buffer> & { destroy?: () => void }, limit: number): Promise<{ text: string; truncated: boolean }> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const room = limit - size;
    if (chunk.length > room) {
      parts.push(chunk.subarray(0, room));
      body.destroy?.();
      return { text: Buffer.concat(parts).toString('utf8'), truncated: true };
    }
    parts.push(chunk);
    size += chunk.length;
  }
  return { text: Buffer.concat(parts).toString('utf8'), truncated: false };
}

/**
 * Splits a byte stream into lines without holding more than one line: each line is handed out as
 * a Buffer (no trailing `\n`). A line longer than `maxLine` is skipped whole (its bytes are not
 * kept) and reported as `{ tooLong: bytes }`, so one bad line cannot take the process's memory.
 */
export async function* lines(stream: AsyncIterable<Uint8Array>, maxLine: number): AsyncGenerator<Buffer | { tooLong: number }> {
  let parts: Buffer[] = [];
  let size = 0;
  let skipping = false;
  for await (const raw of stream) {
    let chunk = Buffer.isBuffer(raw) ? raw : Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
    for (;;) {
      const nl = chunk.indexOf(10);
      const piece = nl === -1 ? chunk : chunk.subarray(0, nl);
      size += piece.length;
      if (!skipping && size > maxLine) {
        skipping = true;
        parts = [];
      }
      // Copy: the chunk's buffer may be reused by the stream once we return to it.
      if (!skipping && piece.length) parts.push(Buffer.from(piece));
      if (nl === -1) break;
      if (skipping) yield { tooLong: size };
      else if (size > 0) yield parts.length === 1 ? parts[0]! : Buffer.concat(parts, size);
      parts = [];
      size = 0;
      skipping = false;
      chunk = chunk.subarray(nl + 1);
    }
  }
  if (skipping) yield { tooLong: size };
  else if (size > 0) yield Buffer.concat(parts, size);
}

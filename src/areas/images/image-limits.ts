/**
 * What an image batch's output can be indexed within. Output files are streamed line by line, so
 * their total size does not matter; one line does: it carries all `n` base64 images of one
 * prompt and is held (and parsed, about three times its size) while it is indexed. The batch size
 * limit (`image.max_n` × `image.max_image_bytes`) is therefore derived from the largest line we
 * accept to hold, and checked at config load.
 */
export const INDEXABLE_LINE_BYTES = 128 * 1024 * 1024;

/** The longest output line a batch of `n` images per prompt can produce: n base64 images of at most `maxImageBytes` each, plus the line's JSON. */
export function maxLineBytes(n: number, maxImageBytes: number): number {
  return n * Math.ceil((maxImageBytes * 4) / 3) + 64 * 1024;
}

/** The largest `image.max_n` that can be indexed with images of `maxImageBytes`. */
export function maxIndexableN(maxImageBytes: number): number {
  return Math.max(0, Math.floor((INDEXABLE_LINE_BYTES - 64 * 1024) / Math.ceil((maxImageBytes * 4) / 3)));
}

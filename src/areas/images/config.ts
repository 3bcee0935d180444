import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { DAY, positiveDuration, positiveInt, providerUrl, s3Fields } from '../../config/fields.js';
import { INDEXABLE_LINE_BYTES, maxIndexableN } from './image-limits.js';

/** `image.s3`: the same shape as `backup.s3` (no part size: an image is one PUT). Credentials only from the AWS variables. */
const s3 = z.object(s3Fields).strict();

/** The images area's config sections (keys of the config file), in config.example.yaml order. */
export const imagesConfig = {
  // Paid image batches through an OpenAI-compatible Batch API (batch_image_worker, /api/v1/image-batches).
  image: z
    .object({
      provider: z
        .object({
          base_url: providerUrl(/^https?:\/\/.+\/v1\/?$/, 'expected an http(s) URL ending in /v1', 'image.provider.api_key').optional(),
          api_key: z.string().min(1).optional(),
          request_timeout: positiveDuration.default(30_000),
          // Downloading one output file (streamed; it can be several GB).
          download_timeout: positiveDuration.default(600_000),
          lookup_pages: positiveInt.default(20),
        })
        .strict()
        .prefault({}),
      prices: z
        .record(
          z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'expected a model name of 1-64 characters of letters, digits, . _ -'),
          z.coerce.number().int('expected an integer price in minor units per image').min(0, 'expected a price of 0 or more minor units'),
        )
        .default({}),
      max_prompts: positiveInt.default(500),
      max_prompt_chars: positiveInt.default(4000),
      max_n: positiveInt.default(4),
      // One decoded image in an output file; with max_n it bounds the output line held while indexing.
      max_image_bytes: positiveInt.default(8 * 1024 * 1024),
      concurrency: positiveInt.default(4),
      poll_interval: positiveDuration.default(10_000),
      claim_interval: positiveDuration.default(1000),
      lease: positiveDuration.default(60_000),
      retry_delay: positiveDuration.default(60_000),
      stale_timeout: positiveDuration.default(600_000),
      max_errors: positiveInt.default(20),
      input_retention: positiveDuration.refine((ms) => ms <= 7 * DAY, 'at most 7d').default(DAY),
      output_retention: positiveDuration.refine((ms) => ms <= 7 * DAY, 'at most 7d').default(3 * DAY),
      // Where inputs and images live: `fs` (image.storage_dir) or `s3` (image.s3), shared by every replica.
      storage: z.enum(['fs', 's3']).default('fs'),
      storage_dir: z.string().min(1).optional(),
      s3: s3.optional(),
      // The orphan sweep: objects no batch references, older than orphan_min_age, deleted every orphan_sweep_interval.
      orphan_sweep_interval: positiveDuration.default(6 * 3_600_000),
      orphan_min_age: positiveDuration.default(3_600_000),
    })
    .strict()
    .superRefine((im, ctx) => {
      if (im.storage === 's3' && !im.s3) ctx.addIssue({ code: 'custom', path: ['storage'], message: 's3 needs image.s3.bucket (and image.s3.region or .endpoint as needed)' });
      if (im.max_n > maxIndexableN(im.max_image_bytes))
        ctx.addIssue({
          code: 'custom',
          path: ['max_n'],
          message: `at most ${maxIndexableN(im.max_image_bytes)} with image.max_image_bytes = ${im.max_image_bytes}: one output line (max_n base64 images) must stay under ${INDEXABLE_LINE_BYTES} bytes to be indexed`,
        });
    })
    .prefault({}),
};

// Its sections in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof imagesConfig> {}
}

import { z } from 'zod';
import type { ConfigSectionsOf } from '../../config/schema.js';
import { positiveDuration } from '../../config/duration-schema.js';
import { s3Fields } from '../../config/fields.js';

const s3 = z
  .object({
    ...s3Fields,
    part_size_mb: z.coerce.number().int().min(5).max(512).default(16),
  })
  .strict();

/**
 * `backup`: where backups go and how long they stay (the `backup` job's schedule is under
 * `jobs.backup`). Credentials for S3 come from the usual AWS variables, never from this file.
 */
export const backupSchema = z
  .object({
    storage: z.enum(['fs', 's3']).default('fs'),
    /** Default `<data_dir>/backups` (resolved where the data directory is known). */
    dir: z.string().min(1).optional(),
    s3: s3.optional(),
    keep_last: z.coerce.number().int().min(1).default(14),
    keep_days: z.coerce.number().int().min(1).optional(),
    /** Default: on in cluster mode (restore into a scratch database), off in embedded mode. */
    verify: z.boolean().optional(),
    compression: z.enum(['gzip']).default('gzip'),
    compression_level: z.coerce.number().int().min(1).max(9).default(6),
    lease: positiveDuration.default(30_000),
    /** Directory holding pg_dump/pg_restore of the server's major version (default: PATH). */
    pg_bin_dir: z.string().min(1).optional(),
  })
  .strict()
  .superRefine((b, ctx) => {
    if (b.storage === 's3' && !b.s3) ctx.addIssue({ code: 'custom', path: ['storage'], message: 's3 needs backup.s3.bucket (and backup.s3.region or .endpoint as needed)' });
  })
  .prefault({});

export type BackupConfig = z.infer<typeof backupSchema>;

/** The backup area's config sections (keys of the config file). */
export const backupConfig = { backup: backupSchema };

// Its sections in `Config`'s type (config/schema.ts, `AreaConfigSections`); the area list composes the schema.
declare module '../../config/schema.js' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members come from the schema
  interface AreaConfigSections extends ConfigSectionsOf<typeof backupConfig> {}
}

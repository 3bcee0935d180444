import { join } from 'node:path';
import type { Config } from '../../config/load.js';
import { FsObjectStore, type ObjectStore } from './object-store.js';
import { S3ObjectStore } from './s3-object-store.js';

/** The store `image.storage` names: `image.storage_dir` (default `<data_dir>/objects`) or the `image.s3` bucket. */
export function imageObjectStore(config: Config): ObjectStore {
  const c = config.image;
  if (c.storage === 's3') {
    const s = c.s3!;
    const prefix = s.prefix && !s.prefix.endsWith('/') ? `${s.prefix}/` : s.prefix;
    return new S3ObjectStore({ bucket: s.bucket, prefix, region: s.region, endpoint: s.endpoint, forcePathStyle: s.force_path_style });
  }
  return new FsObjectStore(c.storage_dir ?? join(config.database.data_dir, 'objects'));
}

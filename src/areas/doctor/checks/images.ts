import { imageObjectStore } from '../../images/index.js';
import { fail, ok, warn, type DoctorCheck } from '../check.js';

/**
 * `image_store`: where image batch inputs and outputs live (`image.storage`). On `s3`: the bucket
 * answers, exists and takes a write (a probe object written, read back and deleted; the one write
 * of this check). On `fs`: the directory takes the same probe, and a cluster of more than one live
 * replica is warned: each replica keeps the images it made on its own disk, so another replica
 * answers 404 for them and retention there never deletes them.
 */
export const imageStore: DoctorCheck = {
  name: 'image_store',
  group: 'images',
  modes: ['cluster', 'embedded'],
  async run({ config, instances, nowMs }) {
    const im = config.image;
    if (im.storage === 'fs' && !im.provider.base_url) return ok('image batches are off (no image.provider.base_url); nothing is stored', 'nothing to do');
    const store = imageObjectStore(config);
    const where = store.location('');
    try {
      await store.check(`doctor-probe/${config.instance.id.replace(/[^A-Za-z0-9._-]/g, '_')}-${process.pid}-${nowMs}`);
    } catch (err) {
      return fail(
        `the image store cannot be used: ${(err as Error).message.split('\n')[0]}`,
        im.storage === 's3'
          ? 'check image.s3.bucket, .endpoint, .region, .force_path_style and the AWS credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or a role); the bucket must exist'
          : `make ${where} (image.storage_dir) a writable directory of the service's user`,
      );
    } finally {
      store.close();
    }
    const replicas = instances.filter((i) => i.alive).length;
    if (im.storage === 'fs' && config.mode === 'cluster' && replicas > 1)
      return warn(
        `${replicas} live replicas keep images on their own disk (image.storage: fs, ${where}): an image made on one answers 404 on the others, and retention deletes only the runner's files`,
        'set image.storage: s3 and image.s3.bucket (an S3 or S3-compatible bucket every replica reaches); keep fs only if image.storage_dir is one volume shared by every replica',
      );
    return ok(`${store.kind === 's3' ? 'S3 bucket' : 'directory'} ${where} reachable and writable (a probe object written, read back and deleted)`, 'nothing to do');
  },
};

import type { Readable } from 'node:stream';
import type { S3Client } from '@aws-sdk/client-s3';
import { ObjectStoreUnavailable, type ObjectStore, type StoredObject } from './object-store.js';

export interface S3ObjectStoreOptions {
  bucket: string;
  /** Ends with `/` unless empty. */
  prefix: string;
  region: string;
  endpoint?: string;
  forcePathStyle: boolean;
}

type SdkError = { name?: string; message?: string; code?: string; $metadata?: { httpStatusCode?: number } };

const status = (err: unknown) => (err as SdkError).$metadata?.httpStatusCode;
const isMissingKey = (err: unknown) => (err as SdkError).name === 'NoSuchKey' || ((err as SdkError).name === 'NotFound' && status(err) === 404);

/** One line naming what failed, never a credential: the SDK's class name, the HTTP status, the first line of its message. */
function describe(err: unknown): string {
  const e = err as SdkError;
  const code = status(err);
  // HEAD answers carry no body: the SDK can only say "Unknown".
  if (code === 403 && (!e.name || e.name === 'Unknown' || e.name === '403')) return 'access denied (HTTP 403): check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket policy';
  if (e.name === 'NoSuchBucket' || (code === 404 && (!e.name || e.name === 'Unknown' || e.name === 'NotFound'))) return 'no such bucket (HTTP 404)';
  const msg = (e.message ?? String(err)).split('\n')[0];
  return `${e.name ?? e.code ?? 'Error'}${code ? ` (HTTP ${code})` : ''}: ${msg || 'no message'}`;
}

/**
 * The SDK, imported on first use (about 300 modules; a replica keeping images on `fs` never loads
 * it). CommonJS: imported, its exports are the namespace's `default` (a bundle gives only that one).
 */
type Sdk = typeof import('@aws-sdk/client-s3');
let sdkLoad: Promise<Sdk> | null = null;
const loadSdk = (): Promise<Sdk> => (sdkLoad ??= import('@aws-sdk/client-s3').then((m) => (m as { default?: Sdk }).default ?? m));

/**
 * Image objects in an S3 bucket (or any S3-compatible store: MinIO, R2, s3rver) through the AWS
 * SDK v3, so every replica reads what any replica wrote. Credentials come from the SDK's default
 * chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, instance or pod roles); they are
 * never in the config file, a record or a message. Every failure to reach, read or write the
 * bucket is an ObjectStoreUnavailable naming the bucket and the SDK's one-line reason.
 */
export class S3ObjectStore implements ObjectStore {
  readonly kind = 's3' as const;
  private session: Promise<{ sdk: Sdk; client: S3Client }> | null = null;

  constructor(private readonly o: S3ObjectStoreOptions) {}

  private sdk(): Promise<{ sdk: Sdk; client: S3Client }> {
    const o = this.o;
    return (this.session ??= loadSdk().then((sdk) => {
      // The SDK's "Node 22 will be needed after January 2027" notice concerns releases we do not use (docs/backup.md).
      process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
      // Two attempts and a connect timeout: an outage is answered in seconds (a clear 503), not after a long backoff.
      const client = new sdk.S3Client({
        region: o.region,
        endpoint: o.endpoint,
        forcePathStyle: o.forcePathStyle,
        maxAttempts: 2,
        requestHandler: { connectionTimeout: 3000, requestTimeout: 30_000 },
      });
      return { sdk, client };
    }));
  }

  private full(key: string): string {
    return `${this.o.prefix}${key}`;
  }

  private unavailable(what: string, key: string, err: unknown): ObjectStoreUnavailable {
    return new ObjectStoreUnavailable(`image store ${what} ${this.location(key)} failed: ${describe(err)}`);
  }

  location(key: string): string {
    return `s3://${this.o.bucket}/${this.full(key)}${this.o.endpoint ? ` at ${this.o.endpoint}` : ''}`;
  }

  async put(key: string, data: Buffer | string): Promise<void> {
    const { sdk, client } = await this.sdk();
    const type = key.endsWith('.png') ? 'image/png' : key.endsWith('.jsonl') ? 'application/jsonl' : 'application/octet-stream';
    try {
      // One PUT: an object here is one decoded image (at most image.max_image_bytes) or a batch's input file.
      await client.send(new sdk.PutObjectCommand({ Bucket: this.o.bucket, Key: this.full(key), Body: data, ContentType: type }));
    } catch (err) {
      throw this.unavailable('write of', key, err);
    }
  }

  async get(key: string): Promise<Buffer | null> {
    const opened = await this.open(key);
    if (!opened) return null;
    const parts: Buffer[] = [];
    try {
      for await (const chunk of opened.stream) parts.push(chunk as Buffer);
    } catch (err) {
      throw this.unavailable('read of', key, err);
    }
    return Buffer.concat(parts);
  }

  async open(key: string): Promise<{ stream: Readable; size: number } | null> {
    const { sdk, client } = await this.sdk();
    try {
      const res = await client.send(new sdk.GetObjectCommand({ Bucket: this.o.bucket, Key: this.full(key) }));
      return { stream: res.Body as Readable, size: Number(res.ContentLength ?? 0) };
    } catch (err) {
      if (isMissingKey(err)) return null;
      throw this.unavailable('read of', key, err);
    }
  }

  async deletePrefix(prefix: string): Promise<void> {
    if (!prefix.endsWith('/')) return this.deleteKeys([prefix]);
    for await (const page of this.list(prefix)) await this.deleteKeys(page.map((o) => o.key));
  }

  async deleteKeys(keys: string[]): Promise<void> {
    const { sdk, client } = await this.sdk();
    for (let i = 0; i < keys.length; i += 1000) {
      const chunk = keys.slice(i, i + 1000);
      try {
        const res = await client.send(new sdk.DeleteObjectsCommand({ Bucket: this.o.bucket, Delete: { Objects: chunk.map((k) => ({ Key: this.full(k) })), Quiet: true } }));
        const failed = (res.Errors ?? []).filter((e) => e.Code !== 'NoSuchKey');
        if (failed.length)
          throw Object.assign(new Error(`${failed.length} of ${chunk.length} deletes refused; first: ${failed[0]!.Code ?? '?'} ${failed[0]!.Message ?? ''}`), { name: 'DeleteObjects' });
      } catch (err) {
        throw this.unavailable('delete of', chunk.length === 1 ? chunk[0]! : `${chunk[0]} (+${chunk.length - 1})`, err);
      }
    }
  }

  async *list(prefix: string): AsyncIterable<StoredObject[]> {
    const { sdk, client } = await this.sdk();
    let token: string | undefined;
    do {
      let res: import('@aws-sdk/client-s3').ListObjectsV2CommandOutput;
      try {
        res = await client.send(new sdk.ListObjectsV2Command({ Bucket: this.o.bucket, Prefix: this.full(prefix), ContinuationToken: token, MaxKeys: 1000 }));
      } catch (err) {
        throw this.unavailable('listing of', prefix, err);
      }
      const page = (res.Contents ?? [])
        .filter((c) => c.Key?.startsWith(this.o.prefix))
        .map((c) => ({ key: c.Key!.slice(this.o.prefix.length), size: Number(c.Size ?? 0), modifiedMs: c.LastModified ? c.LastModified.getTime() : 0 }));
      if (page.length) yield page;
      token = res.IsTruncated ? res.NextContinuationToken : undefined;
    } while (token);
  }

  /** HEAD bucket (reachable, present, credentials accepted), then a probe object written, read back and deleted. */
  async check(probeKey: string): Promise<void> {
    const { sdk, client } = await this.sdk();
    try {
      await client.send(new sdk.HeadBucketCommand({ Bucket: this.o.bucket }));
    } catch (err) {
      throw new ObjectStoreUnavailable(`S3 bucket ${this.o.bucket}${this.o.endpoint ? ` at ${this.o.endpoint}` : ''} cannot be reached: ${describe(err)}`);
    }
    await this.put(probeKey, 'relay-jobs image store probe');
    if (!(await this.get(probeKey))) throw new ObjectStoreUnavailable(`image store ${this.location(probeKey)}: a probe written was not found on reading it back`);
    await this.deleteKeys([probeKey]);
  }

  close(): void {
    void this.session?.then(({ client }) => client.destroy()).catch(() => undefined);
  }
}

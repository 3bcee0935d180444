import type { Readable } from 'node:stream';
import type { S3Client } from '@aws-sdk/client-s3';
import { UserError } from '../../config/errors.js';
import { checksumKey, type BackupStorage } from './backup-storage.js';

export interface S3StorageOptions {
  bucket: string;
  prefix: string;
  region: string;
  endpoint?: string;
  forcePathStyle: boolean;
  partSizeMb: number;
}

function describe(err: unknown): string {
  const e = err as { name?: string; message?: string; $metadata?: { httpStatusCode?: number }; code?: string };
  const code = e.$metadata?.httpStatusCode;
  const status = code ? ` (HTTP ${code})` : '';
  // HEAD answers carry no body: the SDK can only say "Unknown".
  if (code === 403 && (!e.name || e.name === 'Unknown' || e.name === '403')) return `access denied (HTTP 403): check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket policy`;
  if (code === 404 && (!e.name || e.name === 'Unknown' || e.name === 'NotFound')) return `no such bucket (HTTP 404)`;
  const msg = (e.message ?? String(err)).split('\n')[0];
  return `${e.name ?? e.code ?? 'Error'}${status}: ${msg || 'no message'}`;
}

/**
 * Backups in an S3 bucket (or any S3-compatible store) through the AWS SDK v3: multipart
 * upload with a bounded number of parts in memory, so a dump of any size streams through.
 * Credentials come from the SDK's default chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_PROFILE, instance roles); they never appear in config, records or messages.
 */
type Sdk = { s3: typeof import('@aws-sdk/client-s3'); Upload: typeof import('@aws-sdk/lib-storage').Upload };

/**
 * The SDK's two packages, imported on first use: they are about 300 modules, which every replica and
 * CLI run would otherwise load at start-up whether or not `backup.storage` is `s3`. Both are
 * CommonJS: imported, their exports are the namespace's `default` (a bundle gives only that one).
 */
let sdkLoad: Promise<Sdk> | null = null;
const loadSdk = (): Promise<Sdk> => (sdkLoad ??= Promise.all([import('@aws-sdk/client-s3'), import('@aws-sdk/lib-storage')]).then(([s3, storage]) => ({ s3: cjs(s3), Upload: cjs(storage).Upload })));
const cjs = <T>(namespace: T): T => (namespace as { default?: T }).default ?? namespace;

export class S3Storage implements BackupStorage {
  readonly kind = 's3' as const;
  private session: Promise<{ sdk: Sdk; client: S3Client }> | null = null;

  constructor(private readonly opts: S3StorageOptions) {}

  /** The SDK and this storage's client, made on first use. */
  private sdk(): Promise<{ sdk: Sdk; client: S3Client }> {
    const opts = this.opts;
    return (this.session ??= loadSdk().then((sdk) => {
      // The SDK warns on Node < 22 that its releases after January 2027 will need Node 22. relay-jobs
      // needs Node 22.13 (engines), where the SDK is silent; CI still runs the suite on Node 20, so the
      // exact pin in package.json (3.1178.0, engines >=20) stays on releases that run there, and the
      // notice, about an upgrade not taken, is turned off with the SDK's own switch unless the operator
      // set it (docs/backup.md).
      process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
      return { sdk, client: new sdk.s3.S3Client({ region: opts.region, endpoint: opts.endpoint, forcePathStyle: opts.forcePathStyle, maxAttempts: 3 }) };
    }));
  }

  private full(key: string): string {
    return `${this.opts.prefix}${key}`;
  }

  location(key: string): string {
    return `s3://${this.opts.bucket}/${this.full(key)}`;
  }

  async check(): Promise<void> {
    const { sdk, client } = await this.sdk();
    try {
      await client.send(new sdk.s3.HeadBucketCommand({ Bucket: this.opts.bucket }));
    } catch (err) {
      throw new UserError(`S3 bucket ${this.opts.bucket}${this.opts.endpoint ? ` at ${this.opts.endpoint}` : ''} cannot be reached: ${describe(err)}`);
    }
  }

  async put(key: string, body: Readable, signal?: AbortSignal): Promise<void> {
    const { sdk, client } = await this.sdk();
    const upload = new sdk.Upload({
      client,
      params: { Bucket: this.opts.bucket, Key: this.full(key), Body: body, ContentType: 'application/gzip' },
      partSize: this.opts.partSizeMb * 1024 * 1024,
      queueSize: 2,
      leavePartsOnError: false,
    });
    const onAbort = () => void upload.abort().catch(() => undefined);
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await upload.done();
    } catch (err) {
      if (signal?.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('backup aborted');
      throw new UserError(`upload to ${this.location(key)} failed: ${describe(err)}`);
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  async putText(key: string, text: string): Promise<void> {
    const { sdk, client } = await this.sdk();
    try {
      await client.send(new sdk.s3.PutObjectCommand({ Bucket: this.opts.bucket, Key: this.full(key), Body: text, ContentType: 'text/plain' }));
    } catch (err) {
      throw new UserError(`upload to ${this.location(key)} failed: ${describe(err)}`);
    }
  }

  async open(key: string): Promise<{ stream: Readable; size: number }> {
    const { sdk, client } = await this.sdk();
    try {
      const res = await client.send(new sdk.s3.GetObjectCommand({ Bucket: this.opts.bucket, Key: this.full(key) }));
      return { stream: res.Body as Readable, size: Number(res.ContentLength ?? 0) };
    } catch (err) {
      throw new UserError(`${this.location(key)} cannot be read: ${describe(err)}`);
    }
  }

  async readText(key: string): Promise<string | null> {
    const { sdk, client } = await this.sdk();
    try {
      const res = await client.send(new sdk.s3.GetObjectCommand({ Bucket: this.opts.bucket, Key: this.full(key) }));
      return (await res.Body?.transformToString('utf8')) ?? null;
    } catch {
      return null;
    }
  }

  /** The object, its checksum file and any multipart upload a killed writer left open. */
  async remove(key: string): Promise<void> {
    const { sdk, client } = await this.sdk();
    for (const k of [key, checksumKey(key)]) await client.send(new sdk.s3.DeleteObjectCommand({ Bucket: this.opts.bucket, Key: this.full(k) }));
    try {
      const res = await client.send(new sdk.s3.ListMultipartUploadsCommand({ Bucket: this.opts.bucket, Prefix: this.full(key) }));
      for (const u of res.Uploads ?? []) {
        if (u.Key && u.UploadId) await client.send(new sdk.s3.AbortMultipartUploadCommand({ Bucket: this.opts.bucket, Key: u.Key, UploadId: u.UploadId }));
      }
    } catch {
      // Stores without ListMultipartUploads: the bucket's lifecycle rule for incomplete uploads cleans up.
    }
  }

  /** Closes the client's connections, if it was ever made. */
  close(): void {
    void this.session?.then(({ client }) => client.destroy()).catch(() => undefined);
  }
}

/** `s3://bucket/key` → bucket and key. */
export function parseS3Uri(uri: string): { bucket: string; key: string } | null {
  const m = /^s3:\/\/([^/]+)\/(.+)$/.exec(uri);
  return m ? { bucket: m[1]!, key: m[2]! } : null;
}

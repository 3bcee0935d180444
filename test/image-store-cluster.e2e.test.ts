import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FakeImageProvider } from './fixtures/image-provider.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { startS3 } from './helpers/s3-server.js';
import { waitFor } from './helpers/wait.js';

const BUCKET = 'relay-images-e2e';
const PRICE = 2;
/** `IMAGE_E2E_STORAGE=fs` runs the same test on each replica's own disk: the baseline of the issue, where fetches from the other replica answer 404. */
const STORAGE = process.env.IMAGE_E2E_STORAGE ?? 's3';

/**
 * Issue 50, point 1, with real processes: two `relay-jobs start` replicas, each with a data
 * directory of its own (as two pods with their own volumes), keep images in one S3 bucket
 * (s3rver). Only replica `maker` runs batch_image_worker, so it makes every image; every image is
 * then fetched from `server`, the replica that did not make it. With `image.storage: fs` half of
 * these fetches answered 404 (4 of 8 in the issue).
 */
describe('images on S3: any replica serves any image', () => {
  let s3: Awaited<ReturnType<typeof startS3>>;
  let fake: FakeImageProvider;
  let cluster: Cluster;

  beforeAll(async () => {
    [s3, fake] = await Promise.all([startS3(BUCKET), FakeImageProvider.start()]);
    cluster = await startCluster({
      replicas: ['maker', 'server'],
      env: {
        AWS_ACCESS_KEY_ID: 'S3RVER',
        AWS_SECRET_ACCESS_KEY: 'S3RVER',
        AWS_REGION: 'us-east-1',
        RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: fake.url,
        RELAY_JOBS__IMAGE__PROVIDER__API_KEY: 'sk-e2e-s3-image-key',
        RELAY_JOBS__IMAGE__PRICES__IMG_E2E: String(PRICE),
        RELAY_JOBS__IMAGE__POLL_INTERVAL: '100ms',
        RELAY_JOBS__IMAGE__CLAIM_INTERVAL: '100ms',
        RELAY_JOBS__IMAGE__RETRY_DELAY: '200ms',
        RELAY_JOBS__IMAGE__STORAGE: STORAGE,
        RELAY_JOBS__IMAGE__S3__BUCKET: BUCKET,
        RELAY_JOBS__IMAGE__S3__ENDPOINT: s3.endpoint,
        RELAY_JOBS__IMAGE__S3__PREFIX: 'cluster/',
        RELAY_JOBS__IMAGE__S3__FORCE_PATH_STYLE: 'true',
      },
      envFor: (id) => ({
        RELAY_JOBS_DATA_DIR: mkdtempSync(join(tmpdir(), `rj-img-${id}-`)),
        RELAY_JOBS__JOBS__BATCH_IMAGE_WORKER__ENABLED: id === 'maker' ? 'true' : 'false',
      }),
    });
  });
  afterAll(async () => {
    await cluster?.stop();
    await fake?.stop();
    await s3?.close();
  });

  it('four batches of two prompts made on one replica: all eight images fetched from the other, byte for byte', async () => {
    const sql = await cluster.sql();
    const { rows } = await sql.query(`INSERT INTO billing_users (email, balance) VALUES ('s3-e2e@test', 100) RETURNING id`);
    const user = Number(rows[0].id);
    const ids: number[] = [];
    for (let i = 0; i < 4; i++) {
      // Submitted to either replica: only `maker` drives them.
      const r = await cluster.api(i % 2 ? 'server' : 'maker', '/image-batches', {
        body: { user_id: user, model: 'img_e2e', prompts: [`a${i}`, `b${i}`] },
        headers: { 'idempotency-key': `s3-e2e-${i}` },
      });
      expect(r.status, await r.clone().text()).toBe(202);
      ids.push(((await r.json()) as { id: number }).id);
    }
    await waitFor(async () => (await sql.query(`SELECT count(*)::int AS n FROM image_batches WHERE id = ANY($1) AND state = 'completed'`, [ids])).rows[0].n === ids.length, {
      what: async () => `every batch completed: ${JSON.stringify((await sql.query(`SELECT id, state, reason FROM image_batches WHERE id = ANY($1)`, [ids])).rows)}`,
      timeoutMs: 120_000,
      intervalMs: 200,
    });
    // `server` runs no batch_image_worker: every image was made on `maker`.
    const jobs = (await (await cluster.api('server', '/jobs')).json()) as { jobs: Array<{ name: string; enabled: boolean }> };
    expect(jobs.jobs.find((j) => j.name === 'batch_image_worker')?.enabled).toBe(false);

    let fetched = 0;
    for (const id of ids) {
      const b = (await (await cluster.api('server', `/image-batches/${id}`)).json()) as { results: Array<{ idx: number; urls: string[] }> };
      expect(b.results).toHaveLength(2);
      for (const r of b.results) {
        for (const url of r.urls) {
          const res = await fetch(cluster.replica('server').url(url), { headers: { authorization: `Bearer ${cluster.adminToken}` } });
          expect(res.status, `${url} from server`).toBe(200);
          expect(res.headers.get('content-type')).toBe('image/png');
          expect(Buffer.from(await res.arrayBuffer()).toString()).toBe(`png:b${id}-p${r.idx}`);
          fetched++;
        }
      }
    }
    expect(fetched).toBe(8);
    const money = (await sql.query(`SELECT balance, frozen_balance FROM billing_users WHERE id = $1`, [user])).rows[0];
    expect({ balance: Number(money.balance), frozen: Number(money.frozen_balance) }).toEqual({ balance: 100 - 8 * PRICE, frozen: 0 });
  });
});

/**
 * Image batches: (1) batches driven per second by one replica's BatchWorker with the loopback
 * Batch API at 0 latency, i.e. the coordination cost of a batch's ~7 transitions; (2) claim
 * throughput of ImageQueue.claim (SKIP LOCKED + lease + fence) against a bare SKIP LOCKED claim
 * of a one-column table, measured in the same run with the same concurrency.
 */
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { ImageBatches } from '../src/areas/images/store/image-batches.js';
import { ImageQueue } from '../src/areas/images/store/image-queue.js';
import { BatchTransitions } from '../src/areas/images/store/image-transitions.js';
import { ImageProvider } from '../src/areas/images/image-provider.js';
import { FsObjectStore } from '../src/areas/images/object-store.js';
import { BatchDriver } from '../src/areas/images/batch-driver.js';
import { BatchWorker } from '../src/areas/images/batch-worker.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FakeImageProvider } from '../test/fixtures/image-provider.js';
import { freshDatabase } from '../test/helpers/services.js';
import { ImagesMetrics } from '../src/areas/images/metrics.js';

export interface ImageBench {
  batches: number;
  seconds: number;
  batchesPerSec: number;
  statementsPerBatch: number;
  claims: number;
  claimPerSec: number;
  bareClaimPerSec: number;
}

async function submitMany(db: PgDb, n: number): Promise<void> {
  const { rows } = await db.query<{ id: string }>(`INSERT INTO billing_users (email, balance) VALUES ('bench@test', $1) RETURNING id`, [n * 100]);
  const batches = new ImageBatches(db);
  for (let i = 0; i < n; i++) await batches.submit({ userId: Number(rows[0]!.id), idempotencyKey: `b${i}`, requestHash: 'h', model: 'm', size: '1024x1024', n: 1, prompts: ['p'], pricePerImage: 1 });
}

async function claimRate(concurrency: number, total: number, claimOne: () => Promise<boolean>): Promise<number> {
  let done = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (done < total && (await claimOne())) done++;
    }),
  );
  return done / ((performance.now() - t0) / 1000);
}

export async function benchImageBatches(n: number, claims: number): Promise<ImageBench> {
  const fresh = await freshDatabase();
  const db = await PgDb.connect({ url: fresh.url, poolSize: 10, connectTimeoutMs: 5000, onError: () => undefined });
  const fake = await FakeImageProvider.start({ latencyMs: 0, pollsToFinish: 1 });
  try {
    await migrate(db);
    await submitMany(db, n);
    const metrics = new Metrics();
    const log = silentLogger();
    const t = new BatchTransitions(db);
    const queue = new ImageQueue(db);
    const store = new FsObjectStore(mkdtempSync(join(tmpdir(), 'rj-bench-img-')));
    const driver = new BatchDriver(
      t,
      new ImageProvider({ baseUrl: fake.url, apiKey: () => 'k', timeoutMs: 5000 }),
      store,
      { pollIntervalMs: 0, retryDelayMs: 0, staleTimeoutMs: 60_000, maxErrors: 5, lookupPages: 1, maxImageBytes: 8 * 1024 * 1024 },
      metrics.group(ImagesMetrics),
      log,
    );
    const worker = new BatchWorker(
      new ImageBatches(db),
      queue,
      driver,
      { owner: 'bench', concurrency: 8, leaseMs: 30_000, claimIntervalMs: 1, retryDelayMs: 0 },
      systemClock,
      metrics.group(ImagesMetrics),
      log,
    );
    const q0 = db.stats.queries;
    const t0 = performance.now();
    for (;;) {
      await worker.tick();
      if (Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM image_batch_queue`)).rows[0]!.n) === 0) break;
      await new Promise((r) => setTimeout(r, 1));
    }
    await worker.idle();
    const seconds = (performance.now() - t0) / 1000;
    const statements = db.stats.queries - q0;
    const ended = Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM image_batches WHERE state = 'completed'`)).rows[0]!.n);

    // Claim throughput: `claims` queue rows, 4 claimers, one row per claim, both tables alike.
    await submitMany(db, claims);
    const claimPerSec = await claimRate(4, claims, async () => (await queue.claim('bench', 1, 30_000)).length === 1);
    await db.exec(`CREATE TABLE bench_bare_queue (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'ready'); CREATE INDEX ON bench_bare_queue (id) WHERE status = 'ready'`);
    await db.query(`INSERT INTO bench_bare_queue (status) SELECT 'ready' FROM generate_series(1, $1)`, [claims]);
    const bareClaimPerSec = await claimRate(
      4,
      claims,
      async () =>
        (
          await db.query(
            `WITH c AS (SELECT id FROM bench_bare_queue WHERE status = 'ready' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) UPDATE bench_bare_queue b SET status = 'active' FROM c WHERE b.id = c.id RETURNING b.id`,
          )
        ).rowCount === 1,
    );
    return { batches: ended, seconds, batchesPerSec: ended / seconds, statementsPerBatch: statements / n, claims, claimPerSec, bareClaimPerSec };
  } finally {
    await fake.stop();
    await db.close();
    await fresh.drop();
  }
}

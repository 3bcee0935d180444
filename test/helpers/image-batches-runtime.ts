import { afterAll, beforeAll, beforeEach } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { loadConfig } from '../../src/app/config-schema.js';
import { Runtime } from '../../src/app/runtime.js';
import { buildHttpServer } from '../../src/http/server.js';
import { silentLogger } from '../../src/telemetry/logger.js';
import type { BatchWorker } from '../../src/areas/images/batch-worker.js';
import { TERMINAL } from '../../src/areas/images/store/image-batches.js';
import { FakeImageProvider } from '../fixtures/image-provider.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './services.js';
import { embeddedDataDir } from './pglite-template.js';
import { waitFor } from './wait.js';

/**
 * Shared by the image-batches-*.test.ts files: one runtime per file on real PostgreSQL (a fresh
 * database) and Redis, its image store in a temporary data directory, against the loopback Batch
 * API (test/fixtures/image-provider.ts) with every fault off before each test. The runtime is
 * never started: a test drives the batch queue itself (`drive`). Prices: img_small at PRICE.
 */

export const ADMIN = 'images-admin-token-0123456789';
export const auth = { authorization: `Bearer ${ADMIN}` };
export const PRICE = 7;

export interface ImageBatchesRuntime {
  sql: pg.Client;
  rt: Runtime;
  http: FastifyInstance;
  fake: FakeImageProvider;
}

/**
 * Registers, in the calling describe, a beforeAll that starts the runtime and the fake provider,
 * an afterAll that stops them and drops the database and keys, and a beforeEach that turns every
 * fault of the fake off. `started()` is the running runtime (from the describe's own beforeAll on);
 * the batch helpers returned read it when called.
 */
export function imageBatchesRuntime() {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let h: ImageBatchesRuntime | undefined;
  let seq = 0;
  const prefix = uniqueName('rjimg');
  const dataDir = embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-images-')));

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    const sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const fake = await FakeImageProvider.start();
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'img-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS_DATA_DIR: dataDir,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: fake.url,
        RELAY_JOBS__IMAGE__PROVIDER__API_KEY: 'sk-image-secret-do-not-log',
        RELAY_JOBS__IMAGE__PROVIDER__REQUEST_TIMEOUT: '1s',
        RELAY_JOBS__IMAGE__PRICES__IMG_SMALL: String(PRICE),
        RELAY_JOBS__IMAGE__MAX_PROMPTS: '10',
        RELAY_JOBS__IMAGE__POLL_INTERVAL: '10ms',
        RELAY_JOBS__IMAGE__RETRY_DELAY: '10ms',
        RELAY_JOBS__IMAGE__STALE_TIMEOUT: '1500ms',
        RELAY_JOBS__IMAGE__MAX_ERRORS: '4',
        RELAY_JOBS__IMAGE__LEASE: '2s',
      },
    });
    const rt = await Runtime.create(config, { logger: silentLogger() });
    const http = buildHttpServer(rt);
    await http.ready();
    h = { sql, rt, http, fake };
  });
  afterAll(async () => {
    await h?.rt.shutdown();
    await h?.http.close();
    await h?.fake.stop();
    await h?.sql.end();
    await db?.drop();
    await dropRedisPrefix(prefix);
  });
  beforeEach(() => {
    const { fake } = started();
    fake.faults = { ...fake.faults, p5xx: 0, p429: 0, pGarbage: 0, pItemFails: 0, pExpire: 0, pBatchFails: 0, pLoseCreateReply: 0, pollsToFinish: 1 };
  });

  const started = (): ImageBatchesRuntime => {
    if (!h) throw new Error('the image batches runtime is not started: use it from a hook or a test');
    return h;
  };
  const svc = () => started().rt.services.imageBatches;
  /** A billing user with `balance`, by id. */
  const newUser = async (balance: number) => {
    const { rows } = await started().sql.query(`INSERT INTO billing_users (email, balance) VALUES ($1, $2) RETURNING id`, [`u${++seq}@test`, balance]);
    return Number(rows[0].id);
  };
  const money = async (user: number) => {
    const { rows } = await started().sql.query(`SELECT balance, frozen_balance FROM billing_users WHERE id = $1`, [user]);
    return { balance: Number(rows[0].balance), frozen: Number(rows[0].frozen_balance) };
  };
  const submit = (key: string | null, payload: unknown) =>
    started().http.inject({ method: 'POST', url: '/api/v1/image-batches', headers: { ...auth, ...(key ? { 'idempotency-key': key } : {}) }, payload: payload as object });
  const get = async (id: number) => (await started().http.inject({ url: `/api/v1/image-batches/${id}`, headers: auth })).json();
  /** Drives the queue on this process until the batch is terminal. */
  const drive = async (id: number, worker: BatchWorker = svc().worker) => {
    await waitFor(
      async () => {
        await worker.tick();
        await worker.idle();
        return TERMINAL.includes((await svc().batches.get(id))!.state);
      },
      { what: async () => `batch ${id} to end: ${JSON.stringify(await get(id))}`, intervalMs: 15, timeoutMs: 30_000 },
    );
    return get(id);
  };
  /** The batch's settlement steps (not its hold), as numbers. */
  const settlements = async (id: number) =>
    (await started().sql.query(`SELECT step, amount, refunded FROM image_batch_money WHERE batch_id = $1 AND step <> 'hold'`, [id])).rows.map((r) => ({
      step: r.step,
      amount: Number(r.amount),
      refunded: Number(r.refunded),
    }));
  return { started, svc, newUser, money, submit, get, drive, settlements };
}

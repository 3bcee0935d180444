import { beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { redactConfig } from '../src/config/load.js';
import type { Runtime } from '../src/app/runtime.js';
import { PRICE, auth, imageBatchesRuntime } from './helpers/image-batches-runtime.js';

/**
 * The image batch API before any batch runs, against real PostgreSQL and the loopback Batch API
 * (test/helpers/image-batches-runtime.ts): a submission holds the money with its record in one
 * commit and replays by Idempotency-Key, bad input names the field and holds nothing, prices and
 * the provider key in the configuration, listing and the queue and hold gauges. Batches run
 * against the provider in image-batches-provider.test.ts; the queue, leases and settlement
 * guards are in image-batches-queue.test.ts.
 */
describe('image batches: submission and listing', () => {
  const { started, svc, newUser, money, submit } = imageBatchesRuntime();
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  beforeAll(() => {
    ({ sql, rt, http } = started());
  });

  it('submit: 202 after the hold and the record commit together; a replay returns the same batch and holds nothing more; another body under the key is 409', async () => {
    const user = await newUser(1000);
    const body = { user_id: user, model: 'img_small', prompts: ['a cat', 'a dog', 'a fox'], n: 2 };
    const r = await submit('k-1', body);
    expect(r.statusCode).toBe(202);
    const b = r.json();
    expect(b).toMatchObject({ state: 'created', image_count: 6, price_per_image: PRICE, hold_amount: 6 * PRICE, replayed: false });
    expect(await money(user)).toEqual({ balance: 1000 - 42, frozen: 42 });
    const queued = await sql.query(`SELECT status FROM image_batch_queue WHERE batch_id = $1`, [b.id]);
    expect(queued.rows).toEqual([{ status: 'ready' }]);

    const again = await submit('k-1', { ...body, prompts: [...body.prompts] });
    expect(again.statusCode).toBe(202);
    expect(again.json()).toMatchObject({ id: b.id, replayed: true });
    expect(await money(user)).toEqual({ balance: 958, frozen: 42 });

    const other = await submit('k-1', { ...body, n: 1 });
    expect(other.statusCode).toBe(409);
    expect(other.json().error.code).toBe('idempotency_conflict');
    expect(await money(user)).toEqual({ balance: 958, frozen: 42 });
    expect(Number((await sql.query(`SELECT count(*) FROM image_batches WHERE user_id = $1`, [user])).rows[0].count)).toBe(1);
  });

  it('bad input is a clear error naming the field, and nothing is held', async () => {
    const user = await newUser(100);
    const cases: Array<[string | null, unknown, number, string]> = [
      [null, { user_id: user, model: 'img_small', prompts: ['x'] }, 400, 'Idempotency-Key'],
      ['b-1', { user_id: user, model: 'no_such_model', prompts: ['x'] }, 400, 'model'],
      ['b-2', { user_id: user, model: 'img_small', prompts: [] }, 400, 'prompts'],
      ['b-3', { user_id: user, model: 'img_small', prompts: Array.from({ length: 11 }, (_, i) => `p${i}`) }, 400, 'prompts'],
      ['b-4', { user_id: user, model: 'img_small', prompts: ['ok', '   '] }, 400, 'prompts.1'],
      ['b-5', { user_id: user, model: 'img_small', prompts: ['x'], size: 'huge' }, 400, 'size'],
      ['b-6', { user_id: user, model: 'img_small', prompts: ['x'], n: 0 }, 400, 'n'],
      ['b-7', { user_id: user, model: 'img_small', prompts: ['x'], colour: 'red' }, 400, 'colour'],
      ['b-8', { user_id: 999_999, model: 'img_small', prompts: ['x'] }, 404, 'user_id'],
    ];
    for (const [key, body, status, field] of cases) {
      const r = await submit(key, body);
      expect(r.statusCode, JSON.stringify(body)).toBe(status);
      expect(r.json().error.fields.map((f: { field: string }) => f.field)).toContain(field);
    }
    // 15 prompts × 1 × 7 = 105 > 100: 402 with the shortfall.
    const short = await submit('b-9', { user_id: user, model: 'img_small', prompts: Array.from({ length: 10 }, () => 'p'), n: 2 });
    expect(short.statusCode).toBe(402);
    expect(short.json().error).toMatchObject({ code: 'insufficient_balance', required: 140, balance: 100, shortfall: 40 });
    expect(await money(user)).toEqual({ balance: 100, frozen: 0 });
    expect(Number((await sql.query(`SELECT count(*) FROM image_batches WHERE user_id = $1`, [user])).rows[0].count)).toBe(0);
  });

  it('an unpriced model and an unconfigured price are refused; the API key never appears in the printed config', () => {
    expect(svc().price('img_small')).toBe(PRICE);
    expect(svc().price('toString')).toBeNull();
    expect(JSON.stringify(redactConfig(rt.config))).not.toContain('sk-image-secret');
    expect(() => loadConfig({ env: { RELAY_JOBS__IMAGE__PRICES__IMG_SMALL: '1.5' } })).toThrow(/image\.prices\.img_small.*integer/);
    expect(() => loadConfig({ env: { RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: 'http://x/api' } })).toThrow(/image\.provider\.base_url.*\/v1/);
    expect(() => loadConfig({ env: { RELAY_JOBS__IMAGE__OUTPUT_RETENTION: '8d' } })).toThrow(/image\.output_retention.*7d/);
  });

  it('lists batches by user and state, and exports the queue and hold gauges', async () => {
    const user = await newUser(100);
    await submit('l-1', { user_id: user, model: 'img_small', prompts: ['x'] });
    const list = (await http.inject({ url: `/api/v1/image-batches?user_id=${user}&state=created`, headers: auth })).json();
    expect(list.batches).toHaveLength(1);
    expect((await http.inject({ url: `/api/v1/image-batches?state=bogus`, headers: auth })).statusCode).toBe(400);
    await svc().maintain();
    const text = await rt.metrics.registry.metrics();
    expect(text).toMatch(/relay_jobs_image_queue_batches\{status="ready"\} [1-9]/);
    expect(text).toMatch(/relay_jobs_image_holds_open [1-9]/);
    expect(text).not.toContain('sk-image-secret');
  });
});

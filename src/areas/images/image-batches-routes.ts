import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { ImagesServices } from './wiring.js';
import { parseId } from '../../http/validation.js';
import { json, media, route } from '../../http/contract.js';
import { Conflict, notFound, InvalidInput } from '../../errors/app-error.js';
import { BATCH_STATES, type ImageBatch } from './store/image-batches.js';

const KEY = /^[A-Za-z0-9._:-]{1,128}$/;
const tag = 'images';
const NO_BATCH = 'no image batch with this id';

const listQuery = z
  .object({
    user_id: z.coerce.number().int().positive().optional(),
    state: z.enum(BATCH_STATES).optional(),
    before_id: z.coerce.number().int().positive().optional().meta({ description: 'newest first: the batches before this id' }),
    limit: z.coerce.number().int().min(1).max(500).default(50),
  })
  .strict();
const IdParams = z.object({ id: z.string().meta({ description: 'the batch id' }) });
const ImageParams = IdParams.extend({ idx: z.string().meta({ description: "the prompt's index" }), k: z.string().meta({ description: 'the image of that prompt' }) });

const time = z.iso.datetime({ offset: true });
/** A batch as the API shows it: its prompts counted, not repeated. */
const Batch = z
  .object({
    id: z.number().int(),
    user_id: z.number().int(),
    model: z.string(),
    size: z.string(),
    n: z.number().int(),
    prompt_count: z.number().int(),
    image_count: z.number().int(),
    price_per_image: z.number().int(),
    hold_amount: z.number().int().meta({ description: 'held from the balance at submit; settled for what was produced' }),
    state: z.enum(BATCH_STATES),
    reason: z.string().nullable(),
    cancel_requested: z.boolean(),
    input_file_id: z.string().nullable(),
    create_sent_at: time.nullable(),
    provider_batch_id: z.string().nullable(),
    provider_status: z.string().nullable(),
    output_file_id: z.string().nullable(),
    error_file_id: z.string().nullable(),
    succeeded: z.number().int(),
    failed: z.number().int(),
    captured: z.number().int(),
    errors: z.number().int(),
    ended_at: time.nullable(),
    inputs_deleted_at: time.nullable(),
    created_at: time,
    updated_at: time,
  })
  .meta({ id: 'ImageBatch' });
const Submitted = Batch.extend({ replayed: z.boolean().meta({ description: 'true when the Idempotency-Key had already submitted this batch' }) }).meta({ id: 'ImageBatchSubmitted' });
const BatchList = z.object({ batches: z.array(Batch) }).meta({ id: 'ImageBatchList' });
const BatchDetail = Batch.extend({
  events: z.array(z.object({ from: z.string().nullable(), to: z.string(), reason: z.string().nullable(), at: time.nullable() })),
  money: z.array(z.object({ step: z.string(), amount: z.number().int(), refunded: z.number().int(), at: time.nullable() })),
  results: z.array(
    z.object({
      idx: z.number().int(),
      status: z.string(),
      images: z.number().int(),
      error: z.string().nullable(),
      urls: z.array(z.string()).meta({ description: 'where each stored image is served' }),
    }),
  ),
}).meta({ id: 'ImageBatchDetail' });

/** Paid image batches: submit (idempotent, 202 once the hold is committed), list, read, cancel, and the stored images. */
export function registerImageBatchRoutes(api: FastifyInstance, deps: Pick<RouteDeps<ImagesServices>, 'config' | 'services'>): void {
  const s = deps.services.imageBatches;
  const im = deps.config.image;
  const body = z
    .object({
      user_id: z.number().int().positive(),
      model: z.string().min(1).max(64).meta({ description: 'a model with a price (image.prices)' }),
      prompts: z
        .array(z.string().trim().min(1, 'a prompt must not be empty').max(im.max_prompt_chars, `a prompt has at most ${im.max_prompt_chars} characters`))
        .min(1, 'expected at least one prompt')
        .max(im.max_prompts, `at most ${im.max_prompts} prompts per batch (image.max_prompts)`),
      size: z
        .string()
        .regex(/^[1-9][0-9]{1,4}x[1-9][0-9]{1,4}$/, 'expected WIDTHxHEIGHT such as 1024x1024')
        .default('1024x1024'),
      n: z.number().int().min(1).max(im.max_n, `at most ${im.max_n} images per prompt (image.max_n)`).default(1),
    })
    .strict();

  const view = (b: ImageBatch) => ({ ...b, prompts: undefined, prompt_count: b.prompts.length });

  route(
    api,
    {
      method: 'POST',
      path: '/image-batches',
      operationId: 'submitImageBatch',
      summary: 'Submit a paid image batch (202 once its hold is committed)',
      description: 'Requires the `Idempotency-Key` header (1-128 characters of letters, digits, `. _ : -`): a retry with the same key and body answers the same batch with `replayed: true`.',
      tag,
      body,
      responses: { 202: json(Submitted, { headers: { Location: 'the batch' } }) },
      errors: {
        400: 'invalid input, a missing or malformed `Idempotency-Key`, or a model with no price',
        402: '`insufficient_balance`: the balance does not cover the batch (`required`, `balance`, `shortfall`)',
        404: '`not_found`: no user with this user_id',
        409: '`idempotency_conflict`: the key was first used with a different body',
        503: '`not_configured`: image batches are not configured here (image.provider.base_url)',
      },
    },
    async ({ body: b }, req, reply) => {
      const raw = req.headers['idempotency-key'];
      const key = Array.isArray(raw) ? raw[0] : raw;
      if (!key || !KEY.test(key)) throw new InvalidInput([{ field: 'Idempotency-Key', message: 'required header: 1-128 characters of letters, digits, . _ : -' }]);
      // A refused submit throws SubmitRejected (an AppError naming the field); nothing was held.
      const r = await s.submit(key, b);
      return reply
        .code(202)
        .header('location', `/api/v1/image-batches/${r.batch.id}`)
        .send({ ...view(r.batch), replayed: r.kind === 'replay' });
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/image-batches',
      operationId: 'listImageBatches',
      summary: 'Image batches, newest first',
      tag,
      query: listQuery,
      prefixes: { query: 'query' },
      responses: { 200: json(BatchList) },
    },
    async ({ query: q }) => ({ batches: (await s.batches.list({ userId: q.user_id, state: q.state, beforeId: q.before_id, limit: q.limit })).map(view) }),
  );

  route(
    api,
    {
      method: 'GET',
      path: '/image-batches/:id',
      operationId: 'getImageBatch',
      summary: 'An image batch with its state changes, money steps and results',
      tag,
      params: IdParams,
      responses: { 200: json(BatchDetail) },
      errors: { 404: NO_BATCH },
    },
    async ({ params }) => {
      const id = parseId(params.id) ?? 0;
      const b = await s.batches.get(id);
      if (!b) return notFound(`no image batch ${params.id}`);
      const [events, results, money] = await Promise.all([s.batches.events(id), s.batches.results(id), s.batches.money(id)]);
      return {
        ...view(b),
        events,
        money,
        results: results.map((r) => ({ ...r, object_keys: undefined, urls: r.object_keys.map((_, k) => `/api/v1/image-batches/${id}/images/${r.idx}/${k}`) })),
      };
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/image-batches/:id/cancel',
      operationId: 'cancelImageBatch',
      summary: 'Cancel an image batch (the worker cancels at the provider and settles)',
      tag,
      params: IdParams,
      responses: { 202: json(Batch) },
      errors: { 404: NO_BATCH, 409: '`terminal`: the batch has already ended' },
    },
    async ({ params }, _req, reply) => {
      const id = parseId(params.id) ?? 0;
      const r = await s.cancel(id);
      if (r === 'not_found') return notFound(`no image batch ${params.id}`);
      if (r === 'terminal') throw new Conflict('terminal', `image batch ${id} has already ended`);
      return reply.code(202).send(view((await s.batches.get(id))!));
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/image-batches/:id/images/:idx/:k',
      operationId: 'getImageBatchImage',
      summary: 'One stored image of a batch, from whichever store holds it',
      tag,
      params: ImageParams,
      responses: { 200: media('image/png', 'the image bytes') },
      errors: {
        404: 'no such image (deleted after image.output_retention, or never produced)',
        503: '`object_store_unavailable`: the object store did not answer; the image is kept, try again',
      },
    },
    async ({ params }, _req, reply) => {
      const id = parseId(params.id) ?? 0;
      const idx = /^\d{1,6}$/.test(params.idx) ? Number(params.idx) : -1;
      const k = /^\d{1,3}$/.test(params.k) ? Number(params.k) : -1;
      // Streamed through from whichever store holds it (any replica serves any image): see docs/image-batches.md.
      const image = await s.openImage(id, idx, k);
      if (!image) return notFound(`no image ${params.idx}/${params.k} in batch ${params.id} (deleted after image.output_retention, or never produced)`);
      return reply.type('image/png').header('content-length', image.size).send(image.stream);
    },
  );
}

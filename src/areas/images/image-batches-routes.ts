import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { ImagesServices } from './wiring.js';
import { parseBody, parseId } from '../../http/validation.js';
import { Conflict, notFound, InvalidInput } from '../../errors/app-error.js';
import { BATCH_STATES, type ImageBatch } from './store/image-batches.js';

const KEY = /^[A-Za-z0-9._:-]{1,128}$/;

/** Paid image batches: submit (idempotent, 202 once the hold is committed), list, read, cancel, and the stored images. */
export function registerImageBatchRoutes(api: FastifyInstance, deps: Pick<RouteDeps<ImagesServices>, 'config' | 'services'>): void {
  const s = deps.services.imageBatches;
  const im = deps.config.image;
  const body = z
    .object({
      user_id: z.number().int().positive(),
      model: z.string().min(1).max(64),
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

  api.post('/image-batches', async (req, reply) => {
    const raw = req.headers['idempotency-key'];
    const key = Array.isArray(raw) ? raw[0] : raw;
    if (!key || !KEY.test(key)) throw new InvalidInput([{ field: 'Idempotency-Key', message: 'required header: 1-128 characters of letters, digits, . _ : -' }]);
    const b = parseBody(body, req.body);
    // A refused submit throws SubmitRejected (an AppError naming the field); nothing was held.
    const r = await s.submit(key, b);
    return reply
      .code(202)
      .header('location', `/api/v1/image-batches/${r.batch.id}`)
      .send({ ...view(r.batch), replayed: r.kind === 'replay' });
  });

  api.get('/image-batches', async (req) => {
    const q = parseBody(
      z
        .object({
          user_id: z.coerce.number().int().positive().optional(),
          state: z.enum(BATCH_STATES).optional(),
          before_id: z.coerce.number().int().positive().optional(),
          limit: z.coerce.number().int().min(1).max(500).default(50),
        })
        .strict(),
      req.query,
      'query',
    );
    return { batches: (await s.batches.list({ userId: q.user_id, state: q.state, beforeId: q.before_id, limit: q.limit })).map(view) };
  });

  api.get<{ Params: { id: string } }>('/image-batches/:id', async (req) => {
    const id = parseId(req.params.id) ?? 0;
    const b = await s.batches.get(id);
    if (!b) return notFound(`no image batch ${req.params.id}`);
    const [events, results, money] = await Promise.all([s.batches.events(id), s.batches.results(id), s.batches.money(id)]);
    return {
      ...view(b),
      events,
      money,
      results: results.map((r) => ({ ...r, object_keys: undefined, urls: r.object_keys.map((_, k) => `/api/v1/image-batches/${id}/images/${r.idx}/${k}`) })),
    };
  });

  api.post<{ Params: { id: string } }>('/image-batches/:id/cancel', async (req, reply) => {
    const id = parseId(req.params.id) ?? 0;
    const r = await s.cancel(id);
    if (r === 'not_found') return notFound(`no image batch ${req.params.id}`);
    if (r === 'terminal') throw new Conflict('terminal', `image batch ${id} has already ended`);
    return reply.code(202).send(view((await s.batches.get(id))!));
  });

  api.get<{ Params: { id: string; idx: string; k: string } }>('/image-batches/:id/images/:idx/:k', async (req, reply) => {
    const id = parseId(req.params.id) ?? 0;
    const idx = /^\d{1,6}$/.test(req.params.idx) ? Number(req.params.idx) : -1;
    const k = /^\d{1,3}$/.test(req.params.k) ? Number(req.params.k) : -1;
    // Streamed through from whichever store holds it (any replica serves any image): see docs/image-batches.md.
    const image = await s.openImage(id, idx, k);
    if (!image) return notFound(`no image ${req.params.idx}/${req.params.k} in batch ${req.params.id} (deleted after image.output_retention, or never produced)`);
    return reply.type('image/png').header('content-length', image.size).send(image.stream);
  });
}

import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { ChangeStreamServices } from './wiring.js';
import { parseBody } from '../../http/validation.js';
import { numeric } from '../../config/fields.js';

const querySchema = z
  .object({
    after: numeric(z.number({ error: 'expected a seq (a whole number, 0 or more)' }).int('expected a whole number').min(0).max(Number.MAX_SAFE_INTEGER)).default(0),
    limit: numeric(z.number({ error: 'expected a whole number from 1 to 1000' }).int('expected a whole number').min(1).max(1000)).default(100),
  })
  .strict();

/**
 * `GET /api/v1/changes?after=<seq>&limit=`: the published change events after `seq`, in publish
 * order (the same events, in the same order, as the Redis Stream; the embedded mode's stream).
 * `next` is the seq to ask after next; `gap` says events after `after` were already pruned
 * (`change_stream.retention`): the caller missed some and should re-read its state.
 */
export function registerChangeRoutes(api: FastifyInstance, deps: Pick<RouteDeps<ChangeStreamServices>, 'services'>): void {
  api.get('/changes', async (req) => {
    const q = parseBody(querySchema, req.query, 'query');
    const r = await deps.services.changeEvents.after(q.after, q.limit);
    const next = r.events.length ? r.events[r.events.length - 1]!.seq : Math.max(q.after, 0);
    return { events: r.events, next, last: r.last, gap: r.oldest > 0 && q.after + 1 < r.oldest };
  });
}

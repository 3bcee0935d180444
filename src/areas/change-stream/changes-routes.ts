import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { ChangeStreamServices } from './wiring.js';
import { numeric } from '../../config/fields.js';
import { json, route } from '../../http/contract.js';

const querySchema = z
  .object({
    after: numeric(z.number({ error: 'expected a seq (a whole number, 0 or more)' }).int('expected a whole number').min(0).max(Number.MAX_SAFE_INTEGER))
      .default(0)
      .meta({ description: 'the seq to read after: the `next` of the previous answer (0: from the oldest kept)' }),
    limit: numeric(z.number({ error: 'expected a whole number from 1 to 1000' }).int('expected a whole number').min(1).max(1000)).default(100),
  })
  .strict();

const ChangePage = z
  .object({
    events: z.array(
      z.object({
        seq: z.number().int().meta({ description: 'publish order' }),
        event_id: z.string().meta({ description: 'stable: the same when a crash makes the publisher send it again; dedupe on it' }),
        type: z.string(),
        entity: z.string(),
        id: z.string().meta({ description: "the entity's id, as text (`<user_id>:<platform>` for a quota)" }),
        fields: z.record(z.string(), z.unknown()).meta({ description: "the entity's gateway-visible fields after the change (before it, for `.deleted`)" }),
        changed: z.array(z.string()).optional().meta({ description: 'for an update: the names of the fields that changed' }),
        at: z.iso.datetime({ offset: true }),
      }),
    ),
    next: z.number().int().meta({ description: 'the seq to ask after next' }),
    last: z.number().int().meta({ description: 'the last seq published' }),
    gap: z.boolean().meta({ description: 'events after `after` were already pruned (change_stream.retention): re-read your state' }),
  })
  .meta({ id: 'ChangePage' });

/**
 * `GET /api/v1/changes?after=<seq>&limit=`: the published change events after `seq`, in publish
 * order (the same events, in the same order, as the Redis Stream; the embedded mode's stream).
 * `next` is the seq to ask after next; `gap` says events after `after` were already pruned
 * (`change_stream.retention`): the caller missed some and should re-read its state.
 */
export function registerChangeRoutes(api: FastifyInstance, deps: Pick<RouteDeps<ChangeStreamServices>, 'services'>): void {
  route(
    api,
    {
      method: 'GET',
      path: '/changes',
      operationId: 'listChanges',
      summary: 'The published change events after a seq, in publish order',
      description: "The same events, in the same order, as the Redis Stream (and the embedded mode's stream).",
      tag: 'changes',
      query: querySchema,
      prefixes: { query: 'query' },
      responses: { 200: json(ChangePage) },
    },
    async ({ query: q }) => {
      const r = await deps.services.changeEvents.after(q.after, q.limit);
      const next = r.events.length ? r.events[r.events.length - 1]!.seq : Math.max(q.after, 0);
      return { events: r.events, next, last: r.last, gap: r.oldest > 0 && q.after + 1 < r.oldest };
    },
  );
}

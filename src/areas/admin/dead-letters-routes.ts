import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { AdminServices } from './wiring.js';
import { json, route } from '../../http/contract.js';

const listQuery = z
  .object({
    source: z.enum(['usage', 'usage_spill', 'quota_flush']).optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    after: z.coerce.number().int().min(0).default(0),
  })
  .strict();

const DeadLetter = z
  .object({
    id: z.number().int(),
    source: z.string(),
    reason: z.string(),
    payload: z.string().meta({ description: 'the refused row as JSON text (NUL and lone surrogates escaped)' }),
    created_at: z.iso.datetime({ offset: true }).nullable(),
  })
  .meta({ id: 'DeadLetter' });

/** Rows the batch writers set aside because the database refused their content (see docs/operations.md). */
export function registerDeadLetterRoutes(api: FastifyInstance, deps: Pick<RouteDeps<AdminServices>, 'services'>): void {
  route(
    api,
    {
      method: 'GET',
      path: '/dead-letters',
      operationId: 'listDeadLetters',
      summary: 'Rows the batch writers set aside because the database refused their content',
      tag: 'admin',
      query: listQuery,
      prefixes: { query: 'query' },
      responses: { 200: json(z.object({ dead_letters: z.array(DeadLetter), next_after: z.number().int().nullable().meta({ description: 'pass as `after` for the next page; null on the last' }) })) },
    },
    async ({ query: q }) => {
      const letters = await deps.services.deadLetters.list({ source: q.source, limit: q.limit, afterId: q.after });
      return { dead_letters: letters, next_after: letters.length === q.limit ? letters[letters.length - 1]!.id : null };
    },
  );
}

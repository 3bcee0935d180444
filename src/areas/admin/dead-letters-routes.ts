import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { AdminServices } from './wiring.js';
import { parseBody } from '../../http/validation.js';

const listQuery = z
  .object({
    source: z.enum(['usage', 'usage_spill', 'quota_flush']).optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    after: z.coerce.number().int().min(0).default(0),
  })
  .strict();

/** Rows the batch writers set aside because the database refused their content (see docs/operations.md). */
export function registerDeadLetterRoutes(api: FastifyInstance, deps: Pick<RouteDeps<AdminServices>, 'services'>): void {
  api.get('/dead-letters', async (req) => {
    const q = parseBody(listQuery, req.query, 'query');
    const letters = await deps.services.deadLetters.list({ source: q.source, limit: q.limit, afterId: q.after });
    return { dead_letters: letters, next_after: letters.length === q.limit ? letters[letters.length - 1]!.id : null };
  });
}

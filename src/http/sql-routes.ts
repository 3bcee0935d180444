import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { Runtime } from '../app/runtime.js';
import { readOnlyQuery, SqlRefused } from '../store/sql-console.js';
import { parseBody, sendError } from './validation.js';

const body = z.object({ query: z.string().min(1).max(20_000) }).strict();

/** `POST /api/v1/sql {query}`: one read-only statement (admin); what `relay-jobs sql` uses while a service owns the embedded database. */
export function registerSqlRoutes(api: FastifyInstance, rt: Runtime): void {
  api.post('/sql', async (req, reply) => {
    const { query } = parseBody(body, req.body);
    try {
      return await readOnlyQuery(rt.db, query);
    } catch (err) {
      if (err instanceof SqlRefused) return sendError(reply, 400, 'invalid', err.message);
      // PostgreSQL's own message (syntax error, unknown column, a write in a read-only transaction) is the answer.
      return sendError(reply, 400, 'sql_error', (err as Error).message.split('\n')[0]!);
    }
  });
}

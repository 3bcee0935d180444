import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { Runtime } from '../../app/runtime.js';
import { openSqlConsole, SqlRefused, SqlUnavailable } from './store/sql-console.js';
import { parseBody, sendError } from '../../http/validation.js';

const body = z.object({ query: z.string().min(1).max(20_000) }).strict();

/**
 * `POST /api/v1/sql {query}`: one read-only statement (admin); what `relay-jobs sql` uses while a
 * service owns the embedded database. What it refuses and why: store/sql-guard.ts, docs/security.md.
 */
export function registerSqlRoutes(api: FastifyInstance, rt: Runtime): void {
  const sql = openSqlConsole(rt.config, rt.db);
  api.addHook('onClose', () => sql.close());
  api.post('/sql', async (req, reply) => {
    const { query } = parseBody(body, req.body);
    try {
      return await sql.console.run(query);
    } catch (err) {
      if (err instanceof SqlRefused) return sendError(reply, 400, 'sql_refused', err.message);
      if (err instanceof SqlUnavailable) {
        if (err.reason === 'busy') void reply.header('retry-after', '1');
        return sendError(reply, err.reason === 'busy' ? 429 : 503, err.reason === 'busy' ? 'sql_busy' : 'sql_unsafe_role', err.message);
      }
      // PostgreSQL's own message (syntax error, unknown column, statement timeout) is the answer.
      const e = err as Error & { code?: string };
      if (e.code === '57014') return sendError(reply, 400, 'sql_timeout', `the statement ran longer than sql.statement_timeout (${rt.config.sql.statement_timeout} ms) and was cancelled`);
      return sendError(reply, 400, 'sql_error', e.message.split('\n')[0]!);
    }
  });
}

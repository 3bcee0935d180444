import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { AdminServices } from './wiring.js';
import { openSqlConsole } from './store/sql-console.js';
import { parseBody } from '../../http/validation.js';
import { AppError, badRequest } from '../../errors/app-error.js';

const body = z.object({ query: z.string().min(1).max(20_000) }).strict();

/**
 * `POST /api/v1/sql {query}`: one read-only statement (admin); what `relay-jobs sql` uses while a
 * service owns the embedded database. What it refuses and why: store/sql-guard.ts, docs/security.md.
 */
export function registerSqlRoutes(api: FastifyInstance, deps: Pick<RouteDeps<AdminServices>, 'config' | 'db'>): void {
  const sql = openSqlConsole(deps.config, deps.db);
  // Embedded: the snapshot thread is terminated as soon as shutdown begins (a statement in it is
  // answered 503), not after the requests in flight, which would wait for it.
  if (deps.db.kind === 'pglite') api.addHook('preClose', () => sql.close());
  else api.addHook('onClose', () => sql.close());
  api.post('/sql', async (req) => {
    const { query } = parseBody(body, req.body);
    try {
      return await sql.console.run(query);
    } catch (err) {
      // SqlRefused (the guard said no) and SqlUnavailable (busy, unsafe role) are AppErrors already.
      if (err instanceof AppError) throw err;
      // PostgreSQL's own message (syntax error, unknown column, statement timeout) is the answer.
      const e = err as Error & { code?: string };
      if (e.code === '57014') badRequest('sql_timeout', `the statement ran longer than sql.statement_timeout (${deps.config.sql.statement_timeout} ms) and was cancelled`);
      badRequest('sql_error', e.message.split('\n')[0]!);
    }
  });
}

import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { AdminServices } from './wiring.js';
import { openSqlConsole } from './store/sql-console.js';
import { json, route } from '../../http/contract.js';
import { AppError, badRequest } from '../../errors/app-error.js';

const body = z.object({ query: z.string().min(1).max(20_000).meta({ description: 'one read-only statement' }) }).strict();
const SqlResult = z
  .object({
    columns: z.array(z.string()),
    rows: z.array(z.record(z.string(), z.unknown())),
    truncated: z.boolean(),
    cut: z
      .object({ reason: z.enum(['rows', 'bytes']), limit: z.number() })
      .nullable()
      .meta({ description: 'why and where the reply was cut (`sql.max_rows`, `sql.max_reply_bytes`); null when whole' }),
  })
  .meta({ id: 'SqlResult' });

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
  route(
    api,
    {
      method: 'POST',
      path: '/sql',
      operationId: 'runSql',
      summary: 'Run one read-only SQL statement (what `relay-jobs sql` uses)',
      tag: 'admin',
      body,
      responses: { 200: json(SqlResult) },
      errors: {
        400: "`sql_refused` (not one read-only statement), `sql_error` (PostgreSQL's own message), `sql_timeout`, or invalid input",
        409: '`sql_locked`: the statement gave way to a lock the service needed',
        429: '`sql_busy`: the console runs one statement at a time (`Retry-After`)',
        503: '`sql_unsafe_role`, `sql_unavailable`: the console cannot run here now',
      },
    },
    async ({ body: { query } }) => {
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
    },
  );
}

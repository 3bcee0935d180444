import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { BackupServices } from './wiring.js';
import { UserError } from '../../config/errors.js';
import { parseBody } from '../../http/validation.js';
import { AppError, notFound } from '../../errors/app-error.js';

const listQuery = z.object({ limit: z.coerce.number().int().min(1).max(1000).default(100) }).strict();

/** Backups: start one by hand (202, or 409 naming the one running), list them, read one. */
export function registerBackupRoutes(api: FastifyInstance, deps: Pick<RouteDeps<BackupServices>, 'config' | 'isShuttingDown' | 'log' | 'services'>): void {
  const { backup } = deps.services;

  api.post('/backups', async (req, reply) => {
    parseBody(z.object({}).strict(), req.body);
    if (deps.isShuttingDown) throw new AppError('unavailable', 'shutting_down', 'this replica is shutting down; retry on another');
    try {
      const { id, done } = await backup.start('manual');
      // The backup goes on after the answer; its record says how it ended.
      void done.catch((err: Error) => deps.log.error({ backup: id, err: err.message }, 'backup ended with an unexpected error'));
      return reply.code(202).send({ id, state: 'running', instance_id: deps.config.instance.id, poll: `/api/v1/backups/${id}` });
    } catch (err) {
      // BackupBusy is a Conflict naming the running backup; a backup that cannot start here (storage not set up) is this replica's state, not the request's fault.
      if (err instanceof UserError) throw new AppError('unavailable', 'unavailable', err.message);
      throw err;
    }
  });

  api.get('/backups', async (req) => {
    const q = parseBody(listQuery, req.query, 'query');
    return { backups: await backup.list(q.limit) };
  });

  api.get<{ Params: { id: string } }>('/backups/:id', async (req) => {
    const b = /^[A-Za-z0-9_-]{1,64}$/.test(req.params.id) ? await backup.get(req.params.id) : null;
    return b ? { backup: b } : notFound(`no backup ${req.params.id}`);
  });
}

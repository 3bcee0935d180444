import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { Runtime } from '../../app/runtime.js';
import { UserError } from '../../config/errors.js';
import { BackupBusy } from './backup-service.js';
import { parseBody, sendError } from '../../http/validation.js';

const listQuery = z.object({ limit: z.coerce.number().int().min(1).max(1000).default(100) }).strict();

/** Backups: start one by hand (202, or 409 naming the one running), list them, read one. */
export function registerBackupRoutes(api: FastifyInstance, rt: Runtime): void {
  const { backup } = rt.services;

  api.post('/backups', async (req, reply) => {
    parseBody(z.object({}).strict(), req.body);
    if (rt.isShuttingDown) return sendError(reply, 503, 'shutting_down', 'this replica is shutting down; retry on another');
    try {
      const { id, done } = await backup.start('manual');
      // The backup goes on after the answer; its record says how it ended.
      void done.catch((err: Error) => rt.log.error({ backup: id, err: err.message }, 'backup ended with an unexpected error'));
      return reply.code(202).send({ id, state: 'running', instance_id: rt.config.instance.id, poll: `/api/v1/backups/${id}` });
    } catch (err) {
      if (err instanceof BackupBusy) return reply.code(409).send({ error: { code: 'busy', message: err.message, running_id: err.runningId, instance_id: err.instanceId } });
      if (err instanceof UserError) return sendError(reply, 503, 'unavailable', err.message);
      throw err;
    }
  });

  api.get('/backups', async (req) => {
    const q = parseBody(listQuery, req.query, 'query');
    return { backups: await backup.list(q.limit) };
  });

  api.get<{ Params: { id: string } }>('/backups/:id', async (req, reply) => {
    const b = /^[A-Za-z0-9_-]{1,64}$/.test(req.params.id) ? await backup.get(req.params.id) : null;
    return b ? { backup: b } : sendError(reply, 404, 'not_found', `no backup ${req.params.id}`);
  });
}

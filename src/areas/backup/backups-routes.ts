import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { BackupServices } from './wiring.js';
import { UserError } from '../../config/errors.js';
import { AppError, notFound } from '../../errors/app-error.js';
import { json, route } from '../../http/contract.js';

const listQuery = z.object({ limit: z.coerce.number().int().min(1).max(1000).default(100) }).strict();
const startBody = z.object({}).strict().meta({ description: 'empty: a manual backup takes no options' });
const Params = z.object({ id: z.string().meta({ description: 'the backup id' }) });

const time = z.iso.datetime({ offset: true });
const Backup = z
  .object({
    id: z.string(),
    trigger: z.enum(['schedule', 'manual']),
    state: z.enum(['running', 'completed', 'verified', 'verify_failed', 'failed']),
    instance_id: z.string().meta({ description: 'the replica that ran it' }),
    lease_until: time.nullable(),
    storage: z.enum(['fs', 's3']),
    location: z.string(),
    object_key: z.string(),
    format: z.enum(['pg_dump', 'pglite']),
    compression: z.string(),
    size_bytes: z.number().int().nullable(),
    sha256: z.string().nullable(),
    server_version: z.string().nullable(),
    table_counts: z.record(z.string(), z.number().int()).nullable().meta({ description: 'rows per table at dump time' }),
    job_run_id: z.number().int().nullable(),
    started_at: time,
    finished_at: time.nullable(),
    duration_ms: z.number().int().nullable(),
    verified_at: time.nullable(),
    verify_error: z.string().nullable(),
    error: z.string().nullable(),
  })
  .meta({ id: 'Backup' });
const BackupStarted = z.object({ id: z.string(), state: z.literal('running'), instance_id: z.string(), poll: z.string().meta({ description: 'where to follow it' }) }).meta({ id: 'BackupStarted' });

const BackupList = z.object({ backups: z.array(Backup) }).meta({ id: 'BackupList' });
const BackupDetail = z.object({ backup: Backup }).meta({ id: 'BackupDetail' });

/** Backups: start one by hand (202, or 409 naming the one running), list them, read one. */
export function registerBackupRoutes(api: FastifyInstance, deps: Pick<RouteDeps<BackupServices>, 'config' | 'isShuttingDown' | 'log' | 'services'>): void {
  const { backup } = deps.services;

  route(
    api,
    {
      method: 'POST',
      path: '/backups',
      operationId: 'startBackup',
      summary: 'Start a backup now; it goes on after the answer',
      tag: 'backups',
      body: startBody,
      responses: { 202: json(BackupStarted) },
      errors: {
        409: 'a backup is already running (named in the message)',
        503: '`shutting_down`: this replica is shutting down, retry on another; `unavailable`: backups cannot run here (storage or tools not set up)',
      },
    },
    async (_input, _req, reply) => {
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
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/backups',
      operationId: 'listBackups',
      summary: 'Backups, newest first',
      tag: 'backups',
      query: listQuery,
      prefixes: { query: 'query' },
      responses: { 200: json(BackupList) },
    },
    async ({ query: q }) => ({ backups: await backup.list(q.limit) }),
  );

  route(
    api,
    {
      method: 'GET',
      path: '/backups/:id',
      operationId: 'getBackup',
      summary: 'One backup',
      tag: 'backups',
      params: Params,
      responses: { 200: json(BackupDetail) },
      errors: { 404: 'no backup with this id' },
    },
    async ({ params }) => {
      const b = /^[A-Za-z0-9_-]{1,64}$/.test(params.id) ? await backup.get(params.id) : null;
      return b ? { backup: b } : notFound(`no backup ${params.id}`);
    },
  );
}

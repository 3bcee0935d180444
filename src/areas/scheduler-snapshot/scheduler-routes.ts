import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { SchedulerSnapshotServices } from './wiring.js';
import { parseBody } from '../../http/validation.js';

const querySchema = z
  .object({
    platform: z
      .string({ error: (iss) => (iss.input === undefined ? 'required: the platform whose schedulable accounts to list' : 'expected one value') })
      .regex(/^[a-z0-9_-]{1,32}$/, 'expected a platform name of 1-32 characters a-z, 0-9, _ or -'),
    group: z
      .string({ error: 'expected one value' })
      .regex(/^[A-Za-z0-9_.:-]{0,64}$/, 'expected a group name of at most 64 characters A-Z, a-z, 0-9, _ . : or -')
      .optional(),
  })
  .strict();

/**
 * `GET /api/v1/scheduler/accounts?platform=&group=`: the schedulable accounts of a bucket in
 * routing order, from the snapshot (or PostgreSQL when it misses), with its epoch and age.
 * An unknown platform or group is an empty list; a malformed query is a 400 naming the parameter.
 */
export function registerSchedulerRoutes(api: FastifyInstance, deps: Pick<RouteDeps<SchedulerSnapshotServices>, 'services'>): void {
  api.get('/scheduler/accounts', async (req) => {
    const q = parseBody(querySchema, req.query);
    const answer = await deps.services.schedulerSnapshot.accounts(q.platform, q.group ?? '');
    return { ...answer, count: answer.accounts.length };
  });
}

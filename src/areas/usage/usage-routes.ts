import { InvalidInput, Conflict, notFound } from '../../errors/app-error.js';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { UsageServices } from './wiring.js';
import { GROUPS } from './store/rollups.js';
import { requestHash } from './store/idempotency.js';
import { parseBody, parseId } from '../../http/validation.js';

const when = z.iso.datetime({ offset: true, message: 'expected an ISO 8601 date-time such as 2026-11-30T00:00:00Z' });
const textId = z.union([z.string().min(1).max(128), z.number().int().nonnegative()]).transform(String);
const range = <T extends z.ZodRawShape>(shape: T) =>
  z
    .object({ from: when, to: when, ...shape })
    .strict()
    .refine((r) => Date.parse((r as { to: string }).to) > Date.parse((r as { from: string }).from), { message: 'to must be after from', path: ['to'] });

const usageBody = z.object({ events: z.array(z.unknown(), { message: 'expected an array of usage events' }) }).strict();
// from/to may be left out: the last 24 hours by hour, the last 30 days by day (see DASHBOARD_DEFAULT_SPAN).
const dashboardQuery = z
  .object({
    from: when.optional(),
    to: when.optional(),
    granularity: z.enum(['hour', 'day']).default('hour'),
    group_by: z.enum(Object.keys(GROUPS) as [keyof typeof GROUPS]).default('none'),
    user_id: z.string().optional(),
    account_id: z.string().optional(),
    platform: z.string().optional(),
    model: z.string().optional(),
  })
  .strict()
  .refine((r) => !r.from || !r.to || Date.parse(r.to) > Date.parse(r.from), { message: 'to must be after from', path: ['to'] });
const DASHBOARD_DEFAULT_SPAN = { hour: 24 * 3_600_000, day: 30 * 86_400_000 } as const;
/** The seed's `max_range_days`: one cleanup task covers at most 31 days, so a task stays small enough to watch and cancel. */
export const CLEANUP_MAX_RANGE_DAYS = 31;
const cleanupBody = range({ user_id: textId.optional().nullable(), account_id: textId.optional().nullable() }).refine(
  (r) => Date.parse(r.to) - Date.parse(r.from) <= CLEANUP_MAX_RANGE_DAYS * 86_400_000,
  { message: `the range may span at most ${CLEANUP_MAX_RANGE_DAYS} days (max_range_days); split it into several tasks`, path: ['to'] },
);
const idemKey = { scope: z.string().min(1).max(100), key: z.string().min(1).max(200) };
const beginBody = z
  .object({
    ...idemKey,
    request: z.unknown().optional(),
    request_hash: z
      .string()
      .regex(/^[0-9a-f]{16,128}$/, 'expected a hex digest')
      .optional(),
  })
  .strict()
  .refine((b) => (b.request === undefined) !== (b.request_hash === undefined), { message: 'give exactly one of request (the body, hashed here) or request_hash', path: ['request'] });
const completeBody = z
  .object({ ...idemKey, request: z.unknown().optional(), request_hash: z.string().optional(), response: z.unknown(), status_code: z.number().int().min(100).max(599).optional() })
  .strict()
  .refine((b) => (b.request === undefined) !== (b.request_hash === undefined), { message: 'give exactly one of request or request_hash', path: ['request'] });
const incrementsBody = z
  .object({
    increments: z
      .array(
        z
          .object({ user_id: textId, platform: z.string().min(1).max(64), amount: z.number().int('expected a whole number').min(0, 'expected 0 or more (usage only grows; use reset)').max(1e15) })
          .strict(),
      )
      .min(1)
      .max(10_000),
  })
  .strict();

/** Usage ingestion, dashboard reads, recompute, range cleanups, idempotency and platform quota. */
export function registerUsageRoutes(api: FastifyInstance, deps: Pick<RouteDeps<UsageServices>, 'clock' | 'config' | 'log' | 'requestRound' | 'services'>): void {
  const s = deps.services;

  // A 2xx means every event of the body is stored (committed), not merely queued.
  api.post('/usage', { bodyLimit: 16 * 1024 * 1024 }, async (req) => {
    const { events } = parseBody(usageBody, req.body);
    return s.usage.accept(events);
  });

  api.get('/dashboard/usage', async (req) => {
    const q = parseBody(dashboardQuery, req.query, 'query');
    const span = DASHBOARD_DEFAULT_SPAN[q.granularity];
    const to = q.to ? new Date(q.to) : q.from ? new Date(Date.parse(q.from) + span) : new Date(deps.clock.now());
    const from = q.from ? new Date(q.from) : new Date(to.getTime() - span);
    const points = await s.rollups.query({ from, to, granularity: q.granularity, groupBy: q.group_by, userId: q.user_id, accountId: q.account_id, platform: q.platform, model: q.model });
    return { from: from.toISOString(), to: to.toISOString(), granularity: q.granularity, group_by: q.group_by, timezone: deps.config.usage.timezone, points };
  });

  // Rebuilds the rollups of a range without moving the watermark: a task that dashboard_aggregation
  // rounds run a day at a time with stored progress. A round is requested so it starts at once, or
  // right after the round running now (which may have looked for tasks before this one existed).
  api.post('/usage/recompute', async (req, reply) => {
    const b = parseBody(range({}), req.body);
    const task = await s.recomputes.request(new Date(b.from), new Date(b.to));
    deps.log.info({ recompute_id: task.id, from: task.from, to: task.to, chunks: task.chunks }, 'usage recompute requested');
    deps.requestRound('dashboard_aggregation');
    return reply.code(202).send({ ...task, poll: `/api/v1/usage/recompute/${task.id}` });
  });
  api.get('/usage/recompute', async () => ({ recomputes: await s.recomputes.tasks.list() }));
  api.get<{ Params: { id: string } }>('/usage/recompute/:id', async (req) => {
    const task = await s.recomputes.tasks.get(parseId(req.params.id) ?? 0);
    return task ?? notFound(`no recompute ${req.params.id}`);
  });
  api.post<{ Params: { id: string } }>('/usage/recompute/:id/cancel', async (req) => {
    const id = parseId(req.params.id) ?? 0;
    const task = await s.recomputes.tasks.get(id);
    if (!task) return notFound(`no recompute ${req.params.id}`);
    if (!(await s.recomputes.tasks.cancel(id))) throw new Conflict('finished', `recompute ${id} is already ${task.status}`);
    return s.recomputes.tasks.get(id);
  });

  api.post('/usage/cleanup-tasks', async (req, reply) => {
    const b = parseBody(cleanupBody, req.body);
    const task = await s.cleanupTasks.create({ userId: b.user_id ?? null, accountId: b.account_id ?? null, from: new Date(b.from), to: new Date(b.to) });
    deps.log.info({ task_id: task.id, user_id: task.user_id, account_id: task.account_id }, 'usage cleanup task created');
    return reply.code(201).send(task);
  });
  api.get('/usage/cleanup-tasks', async () => ({ tasks: await s.cleanupTasks.list() }));
  api.get<{ Params: { id: string } }>('/usage/cleanup-tasks/:id', async (req) => {
    const t = await s.cleanupTasks.get(parseId(req.params.id) ?? 0);
    return t ?? notFound(`no cleanup task ${req.params.id}`);
  });
  api.post<{ Params: { id: string } }>('/usage/cleanup-tasks/:id/cancel', async (req) => {
    const id = parseId(req.params.id) ?? 0;
    const t = await s.cleanupTasks.get(id);
    if (!t) return notFound(`no cleanup task ${req.params.id}`);
    if (!(await s.cleanupTasks.cancel(id))) throw new Conflict('finished', `cleanup task ${id} is already ${t.status}`);
    return s.cleanupTasks.get(id);
  });

  api.post('/idempotency/begin', { bodyLimit: 1024 * 1024 }, async (req) => {
    const b = parseBody(beginBody, req.body);
    return s.idempotency.begin(b.scope, b.key, b.request_hash ?? requestHash(b.request));
  });
  api.post('/idempotency/complete', { bodyLimit: 1024 * 1024 }, async (req) => {
    const b = parseBody(completeBody, req.body);
    const ok = await s.idempotency.complete(b.scope, b.key, b.request_hash ?? requestHash(b.request), b.response, b.status_code ?? null);
    if (!ok) throw new Conflict('not_in_progress', `no operation in progress under scope ${JSON.stringify(b.scope)} key ${JSON.stringify(b.key)} with this request; begin it first`);
    return { completed: true };
  });

  api.post('/quota/usage', { bodyLimit: 2 * 1024 * 1024 }, async (req) => {
    const b = parseBody(incrementsBody, req.body);
    const results = [];
    for (const i of b.increments) results.push({ user_id: i.user_id, platform: i.platform, ...(await s.quota.increment(i.user_id, i.platform, i.amount)) });
    return { results };
  });
  api.get<{ Params: { user: string } }>('/quota/:user', async (req) => ({ user_id: req.params.user, platforms: await s.quota.current(req.params.user) }));
  api.post<{ Params: { user: string; platform: string } }>('/quota/:user/:platform/reset', async (req) => {
    if (!req.params.platform) throw new InvalidInput([{ field: 'platform', message: 'expected a platform' }]);
    return { user_id: req.params.user, platform: req.params.platform, used: 0, epoch: await s.quota.reset(req.params.user, req.params.platform) };
  });
}

import { InvalidInput, Conflict, notFound } from '../../errors/app-error.js';
import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../../modules/area.js';
import type { UsageServices } from './wiring.js';
import { requestHash } from './store/idempotency.js';
import { parseId } from '../../http/validation.js';
import { json, route } from '../../http/contract.js';
import {
  CleanupList,
  CleanupTask,
  IdParams,
  IdempotencyBegin,
  IdempotencyCompleted,
  QuotaIncrements,
  QuotaReset,
  QuotaUsage,
  RecomputeList,
  RecomputeStarted,
  RecomputeTask,
  UsageAccepted,
  UsageDashboard,
  UserParams,
  UserPlatformParams,
  beginBody,
  cleanupBody,
  completeBody,
  dashboardQuery,
  incrementsBody,
  recomputeBody,
  usageBody,
} from './usage-contracts.js';

export { CLEANUP_MAX_RANGE_DAYS } from './usage-contracts.js';

const DASHBOARD_DEFAULT_SPAN = { hour: 24 * 3_600_000, day: 30 * 86_400_000 } as const;
const tag = 'usage';

/** Usage ingestion, dashboard reads, recompute, range cleanups, idempotency and platform quota. */
export function registerUsageRoutes(api: FastifyInstance, deps: Pick<RouteDeps<UsageServices>, 'clock' | 'config' | 'log' | 'requestRound' | 'services'>): void {
  const s = deps.services;

  // A 2xx means every event of the body is stored (committed), not merely queued.
  route(
    api,
    {
      method: 'POST',
      path: '/usage',
      operationId: 'recordUsage',
      summary: 'Store a batch of usage events (idempotent by request_id)',
      description: 'A 200 means every event of the batch is committed, not merely queued. A repeated request_id is not stored again: the batch can be retried as is.',
      tag,
      body: usageBody,
      responses: { 200: json(UsageAccepted) },
      errors: { 503: '`queue_full`: the usage queue is full (usage.queue_limit); retry later' },
      options: { bodyLimit: 16 * 1024 * 1024 },
    },
    async ({ body }) => s.usage.accept(body.events),
  );

  route(
    api,
    {
      method: 'GET',
      path: '/dashboard/usage',
      operationId: 'getUsageDashboard',
      summary: 'Usage rollups of a range, by hour or day, optionally grouped',
      description: 'Without from/to: the last 24 hours by hour, the last 30 days by day.',
      tag,
      query: dashboardQuery,
      prefixes: { query: 'query' },
      responses: { 200: json(UsageDashboard) },
    },
    async ({ query: q }) => {
      const span = DASHBOARD_DEFAULT_SPAN[q.granularity];
      const to = q.to ? new Date(q.to) : q.from ? new Date(Date.parse(q.from) + span) : new Date(deps.clock.now());
      const from = q.from ? new Date(q.from) : new Date(to.getTime() - span);
      const points = await s.rollups.query({ from, to, granularity: q.granularity, groupBy: q.group_by, userId: q.user_id, accountId: q.account_id, platform: q.platform, model: q.model });
      return { from: from.toISOString(), to: to.toISOString(), granularity: q.granularity, group_by: q.group_by, timezone: deps.config.usage.timezone, points };
    },
  );

  // Rebuilds the rollups of a range without moving the watermark: a task that dashboard_aggregation
  // rounds run a day at a time with stored progress. A round is requested so it starts at once, or
  // right after the round running now (which may have looked for tasks before this one existed).
  route(
    api,
    {
      method: 'POST',
      path: '/usage/recompute',
      operationId: 'recomputeUsage',
      summary: 'Rebuild the rollups of a range (a task run a day at a time)',
      tag,
      body: recomputeBody,
      responses: { 202: json(RecomputeStarted) },
    },
    async ({ body: b }, _req, reply) => {
      const task = await s.recomputes.request(new Date(b.from), new Date(b.to));
      deps.log.info({ recompute_id: task.id, from: task.from, to: task.to, chunks: task.chunks }, 'usage recompute requested');
      deps.requestRound('dashboard_aggregation');
      return reply.code(202).send({ ...task, poll: `/api/v1/usage/recompute/${task.id}` });
    },
  );
  route(api, { method: 'GET', path: '/usage/recompute', operationId: 'listUsageRecomputes', summary: 'Rollup recomputes', tag, responses: { 200: json(RecomputeList) } }, async () => ({
    recomputes: await s.recomputes.tasks.list(),
  }));
  route(
    api,
    {
      method: 'GET',
      path: '/usage/recompute/:id',
      operationId: 'getUsageRecompute',
      summary: 'One rollup recompute',
      tag,
      params: IdParams,
      responses: { 200: json(RecomputeTask) },
      errors: { 404: 'no recompute with this id' },
    },
    async ({ params }) => {
      const task = await s.recomputes.tasks.get(parseId(params.id) ?? 0);
      return task ?? notFound(`no recompute ${params.id}`);
    },
  );
  route(
    api,
    {
      method: 'POST',
      path: '/usage/recompute/:id/cancel',
      operationId: 'cancelUsageRecompute',
      summary: 'Cancel a rollup recompute',
      tag,
      params: IdParams,
      responses: { 200: json(RecomputeTask) },
      errors: { 404: 'no recompute with this id', 409: '`finished`: it has already ended' },
    },
    async ({ params }) => {
      const id = parseId(params.id) ?? 0;
      const task = await s.recomputes.tasks.get(id);
      if (!task) return notFound(`no recompute ${params.id}`);
      if (!(await s.recomputes.tasks.cancel(id))) throw new Conflict('finished', `recompute ${id} is already ${task.status}`);
      return s.recomputes.tasks.get(id);
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/usage/cleanup-tasks',
      operationId: 'createUsageCleanupTask',
      summary: "Delete a range of raw usage (a user's, an account's, or all), as a task",
      tag,
      body: cleanupBody,
      responses: { 201: json(CleanupTask) },
    },
    async ({ body: b }, _req, reply) => {
      const task = await s.cleanupTasks.create({ userId: b.user_id ?? null, accountId: b.account_id ?? null, from: new Date(b.from), to: new Date(b.to) });
      deps.log.info({ task_id: task.id, user_id: task.user_id, account_id: task.account_id }, 'usage cleanup task created');
      return reply.code(201).send(task);
    },
  );
  route(api, { method: 'GET', path: '/usage/cleanup-tasks', operationId: 'listUsageCleanupTasks', summary: 'Usage cleanup tasks', tag, responses: { 200: json(CleanupList) } }, async () => ({
    tasks: await s.cleanupTasks.list(),
  }));
  route(
    api,
    {
      method: 'GET',
      path: '/usage/cleanup-tasks/:id',
      operationId: 'getUsageCleanupTask',
      summary: 'One usage cleanup task',
      tag,
      params: IdParams,
      responses: { 200: json(CleanupTask) },
      errors: { 404: 'no cleanup task with this id' },
    },
    async ({ params }) => {
      const t = await s.cleanupTasks.get(parseId(params.id) ?? 0);
      return t ?? notFound(`no cleanup task ${params.id}`);
    },
  );
  route(
    api,
    {
      method: 'POST',
      path: '/usage/cleanup-tasks/:id/cancel',
      operationId: 'cancelUsageCleanupTask',
      summary: 'Cancel a usage cleanup task',
      tag,
      params: IdParams,
      responses: { 200: json(CleanupTask) },
      errors: { 404: 'no cleanup task with this id', 409: '`finished`: it has already ended' },
    },
    async ({ params }) => {
      const id = parseId(params.id) ?? 0;
      const t = await s.cleanupTasks.get(id);
      if (!t) return notFound(`no cleanup task ${params.id}`);
      if (!(await s.cleanupTasks.cancel(id))) throw new Conflict('finished', `cleanup task ${id} is already ${t.status}`);
      return s.cleanupTasks.get(id);
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/idempotency/begin',
      operationId: 'beginIdempotent',
      summary: 'Claim an idempotency key for a request, or get its stored response',
      description: '`started`: go ahead, then complete it; `in_progress`: another call holds it until `locked_until`; `replay`: it was completed, here is its response.',
      tag,
      body: beginBody,
      responses: { 200: json(IdempotencyBegin) },
      errors: { 409: '`idempotency_conflict`: the key was first used with a different request body' },
      options: { bodyLimit: 1024 * 1024 },
    },
    async ({ body: b }) => s.idempotency.begin(b.scope, b.key, b.request_hash ?? requestHash(b.request)),
  );
  route(
    api,
    {
      method: 'POST',
      path: '/idempotency/complete',
      operationId: 'completeIdempotent',
      summary: 'Store the response of a claimed idempotency key',
      tag,
      body: completeBody,
      responses: { 200: json(IdempotencyCompleted) },
      errors: { 409: '`not_in_progress`: no operation in progress under this scope, key and request; begin it first' },
      options: { bodyLimit: 1024 * 1024 },
    },
    async ({ body: b }) => {
      const ok = await s.idempotency.complete(b.scope, b.key, b.request_hash ?? requestHash(b.request), b.response, b.status_code ?? null);
      if (!ok) throw new Conflict('not_in_progress', `no operation in progress under scope ${JSON.stringify(b.scope)} key ${JSON.stringify(b.key)} with this request; begin it first`);
      return { completed: true };
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/quota/usage',
      operationId: 'incrementQuotaUsage',
      summary: "Add to users' per-platform usage (live counters, flushed to PostgreSQL)",
      tag,
      body: incrementsBody,
      responses: { 200: json(QuotaIncrements) },
      errors: { 503: '`quota_unavailable`: the counters did not answer; retry later (the increment may already have been applied)' },
      options: { bodyLimit: 2 * 1024 * 1024 },
    },
    async ({ body: b }) => {
      const results = [];
      for (const i of b.increments) results.push({ user_id: i.user_id, platform: i.platform, ...(await s.quota.increment(i.user_id, i.platform, i.amount)) });
      return { results };
    },
  );
  route(
    api,
    {
      method: 'GET',
      path: '/quota/:user',
      operationId: 'getQuotaUsage',
      summary: "A user's usage per platform, as the live counters have it",
      tag,
      params: UserParams,
      // `params.user`, as the text check of every route's parameters names it (NUL, lone surrogates).
      prefixes: { params: 'params' },
      responses: { 200: json(QuotaUsage) },
    },
    async ({ params }) => ({ user_id: params.user, platforms: await s.quota.current(params.user) }),
  );
  route(
    api,
    {
      method: 'POST',
      path: '/quota/:user/:platform/reset',
      operationId: 'resetQuotaUsage',
      summary: "Reset a user's usage of a platform to 0 (a new epoch)",
      tag,
      params: UserPlatformParams,
      prefixes: { params: 'params' },
      responses: { 200: json(QuotaReset) },
    },
    async ({ params }) => {
      if (!params.platform) throw new InvalidInput([{ field: 'platform', message: 'expected a platform' }]);
      return { user_id: params.user, platform: params.platform, used: 0, epoch: await s.quota.reset(params.user, params.platform) };
    },
  );
}

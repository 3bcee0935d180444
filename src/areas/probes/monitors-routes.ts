import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../../modules/area.js';
import type { ProbeServices } from './wiring.js';
import type { AccountsFace } from '../accounts/index.js';
import { formatDuration } from '../../config/duration.js';
import type { MonitorInput } from './store/monitors.js';
import { InvalidInput, notFound } from '../../errors/app-error.js';
import { parseId, type FieldError } from '../../http/validation.js';
import { empty, json, route } from '../../http/contract.js';
import { IdParams, Monitor, MonitorHistory, MonitorList, historyQuery, newMonitorSchema, pageQuery, patchMonitorSchema } from './probes-contracts.js';

const tag = 'monitors';
const NO_MONITOR = 'no monitor with this id';
const RAW_SPAN_MS = 2 * 3_600_000;
const MAX_POINTS = 5000;

/** Channel monitors: CRUD (the key is write-only: sealed on the way in, never returned) and history. */
export function registerMonitorRoutes(api: FastifyInstance, deps: Pick<RouteDeps<ProbeServices & Pick<AccountsFace, 'accounts' | 'tokens'>>, 'clock' | 'config' | 'log' | 'services'>): void {
  const { monitors, monitorHistory, accounts } = deps.services;
  const c = deps.config.channel_monitor;

  /** The whole monitor after a create or a patch must make sense; every problem names its field. */
  async function check(m: MonitorInput, providerGiven = false): Promise<void> {
    const problems: FieldError[] = [];
    if (m.intervalMs < c.min_interval) problems.push({ field: 'interval', message: `must be at least ${formatDuration(c.min_interval)} (channel_monitor.min_interval)` });
    if (m.timeoutMs <= 0) problems.push({ field: 'timeout', message: 'must be greater than zero' });
    if (m.jitterMs > m.intervalMs) problems.push({ field: 'jitter', message: 'must not exceed the interval' });
    if (m.degradedAfterMs !== undefined && m.degradedAfterMs !== null && (m.degradedAfterMs <= 0 || m.degradedAfterMs > 86_400_000))
      problems.push({ field: 'degraded_after', message: 'must be greater than zero and at most 1d' });
    if (m.accountId !== null) {
      if (m.apiKey !== null) problems.push({ field: 'api_key', message: 'give either account_id or api_key, not both' });
      if (providerGiven) problems.push({ field: 'provider', message: "applies to api_key monitors; a monitor with account_id speaks its account's platform" });
      else if (!(await accounts.get(m.accountId))) problems.push({ field: 'account_id', message: `no account ${m.accountId}` });
    } else {
      if (m.baseUrl === null) problems.push({ field: 'base_url', message: 'required unless account_id is given' });
      if (m.apiKey === null) problems.push({ field: 'api_key', message: 'required unless account_id is given' });
    }
    if (problems.length) throw new InvalidInput(problems);
  }

  route(
    api,
    {
      method: 'POST',
      path: '/monitors',
      operationId: 'createMonitor',
      summary: 'Add a channel monitor (probed at once, then on its phase slots)',
      description: 'Either account_id, or base_url with api_key (the key is sealed and never returned).',
      tag,
      body: newMonitorSchema,
      responses: { 201: json(Monitor) },
    },
    async ({ body: b }, _req, reply) => {
      const m: MonitorInput = {
        name: b.name,
        baseUrl: b.base_url ?? null,
        model: b.model,
        apiKey: b.api_key ?? null,
        accountId: b.account_id ?? null,
        intervalMs: b.interval,
        timeoutMs: b.timeout ?? Math.min(c.default_timeout, b.interval),
        jitterMs: b.jitter ?? 0,
        enabled: b.enabled ?? true,
        labels: b.labels ?? {},
        provider: b.provider ?? 'openai',
        challenge: b.challenge ?? false,
        degradedAfterMs: b.degraded_after ?? null,
      };
      await check(m, b.provider !== undefined);
      // Probed at once, then on its phase slots (spread over the interval by its id, not by when it was created).
      const view = await monitors.create(m);
      deps.log.info({ monitor_id: view.id }, 'monitor created');
      return reply.code(201).send(view);
    },
  );

  route(api, { method: 'GET', path: '/monitors', operationId: 'listMonitors', summary: 'Channel monitors, by id', tag, query: pageQuery, responses: { 200: json(MonitorList) } }, async ({ query }) => {
    const limit = Math.min(1000, Math.max(1, query.limit || 100));
    return { monitors: await monitors.list({ afterId: query.after_id || 0, limit }) };
  });

  route(
    api,
    { method: 'GET', path: '/monitors/:id', operationId: 'getMonitor', summary: 'One channel monitor', tag, params: IdParams, responses: { 200: json(Monitor) }, errors: { 404: NO_MONITOR } },
    async ({ params }) => {
      const n = parseId(params.id);
      const view = n && (await monitors.get(n));
      return view || notFound(`no monitor ${params.id}`);
    },
  );

  route(
    api,
    {
      method: 'PATCH',
      path: '/monitors/:id',
      operationId: 'updateMonitor',
      summary: 'Change a channel monitor (a change to what is probed, or how often, is probed at once)',
      tag,
      params: IdParams,
      body: patchMonitorSchema,
      responses: { 200: json(Monitor) },
      errors: { 404: NO_MONITOR },
    },
    async ({ params, body: b }) => {
      const n = parseId(params.id);
      const cur = n && (await monitors.get(n));
      if (!cur) return notFound(`no monitor ${params.id}`);
      const patch: Partial<MonitorInput> = {
        name: b.name,
        baseUrl: b.base_url,
        model: b.model,
        apiKey: b.api_key,
        accountId: b.account_id,
        intervalMs: b.interval,
        timeoutMs: b.timeout,
        jitterMs: b.jitter,
        enabled: b.enabled,
        labels: b.labels,
        provider: b.provider,
        challenge: b.challenge,
        degradedAfterMs: b.degraded_after,
      };
      // Switching to an account drops the stored key; switching to a key needs a new one.
      if (b.account_id) patch.apiKey = b.api_key ?? null;
      const merged: MonitorInput = {
        name: patch.name ?? cur.name,
        baseUrl: patch.baseUrl !== undefined ? patch.baseUrl : cur.base_url,
        model: patch.model ?? cur.model,
        apiKey: patch.apiKey !== undefined ? patch.apiKey : cur.has_api_key ? '(kept)' : null,
        accountId: patch.accountId !== undefined ? patch.accountId : cur.account_id,
        intervalMs: patch.intervalMs ?? cur.interval_ms,
        timeoutMs: patch.timeoutMs ?? cur.timeout_ms,
        jitterMs: patch.jitterMs ?? cur.jitter_ms,
        enabled: patch.enabled ?? cur.enabled,
        labels: patch.labels ?? cur.labels,
        provider: patch.provider ?? cur.provider ?? undefined,
        challenge: patch.challenge ?? cur.challenge,
        degradedAfterMs: patch.degradedAfterMs !== undefined ? patch.degradedAfterMs : cur.degraded_after_ms,
      };
      await check(merged, b.provider !== undefined);
      // An edit to what is probed, or how often, is probed at once (as a new monitor is); a rename or new labels are not.
      const probeNow = ['base_url', 'model', 'api_key', 'account_id', 'interval', 'timeout', 'provider', 'challenge'].some((k) => k in b) || b.enabled === true;
      const view = await monitors.update(n as number, patch, probeNow);
      deps.log.info({ monitor_id: n, fields: Object.keys(b) }, 'monitor updated');
      return view;
    },
  );

  route(
    api,
    {
      method: 'DELETE',
      path: '/monitors/:id',
      operationId: 'deleteMonitor',
      summary: 'Delete a channel monitor and its history',
      tag,
      params: IdParams,
      responses: { 204: empty() },
      errors: { 404: NO_MONITOR },
    },
    async ({ params }, _req, reply) => {
      const n = parseId(params.id);
      if (!n || !(await monitors.delete(n))) return notFound(`no monitor ${params.id}`);
      deps.log.info({ monitor_id: n }, 'monitor deleted');
      return reply.code(204).send();
    },
  );

  /** Raw probes for ranges up to two hours (within raw retention), minute rollups beyond. */
  route(
    api,
    {
      method: 'GET',
      path: '/monitors/:id/history',
      operationId: 'getMonitorHistory',
      summary: "A monitor's probes over a range: raw up to two hours (within the raw retention), minute rollups beyond",
      tag,
      params: IdParams,
      query: historyQuery,
      responses: { 200: json(MonitorHistory) },
      errors: { 404: NO_MONITOR },
    },
    async ({ params, query: q }) => {
      const n = parseId(params.id);
      if (!n || !(await monitors.get(n))) return notFound(`no monitor ${params.id}`);
      const from = new Date(q.from);
      const to = q.to ? new Date(q.to) : new Date(deps.clock.now());
      if (to <= from) throw new InvalidInput([{ field: 'to', message: 'must be after from' }]);
      const rawOk = to.getTime() - from.getTime() <= RAW_SPAN_MS && from.getTime() >= deps.clock.now() - c.raw_retention;
      if (rawOk) return { monitor_id: n, resolution: 'raw', from: from.toISOString(), to: to.toISOString(), points: await monitorHistory.raw(n, from, to, MAX_POINTS) };
      return { monitor_id: n, resolution: 'minute', from: from.toISOString(), to: to.toISOString(), points: await monitorHistory.minutes(n, from, to, MAX_POINTS) };
    },
  );
}

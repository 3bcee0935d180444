import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../../modules/area.js';
import type { OpsServices } from './wiring.js';
import { formatDuration } from '../../config/duration.js';
import { isMonitorMetric } from './monitor-series.js';
import { checkMonitorRule } from './monitor-rule-check.js';
import type { AlertRule, RuleInput } from './store/ops-alerts.js';
import { eventsQuery, IdParams, OpsAlertEventList, OpsAlertRule, OpsAlertRuleList, OpsSilence, OpsSilenceList, ruleCreate, rulePatch, silenceBody, silencesQuery } from './ops-contracts.js';
import { empty, json, route } from '../../http/contract.js';
import { parseId } from '../../http/validation.js';
import { notFound, InvalidInput } from '../../errors/app-error.js';

const DAY = 86_400_000;
const tag = 'ops';
const RuleParams = IdParams('alert rule');

/**
 * A rule's window must span at least one bucket and stay inside what it reads: the minute series'
 * retention, or for a monitor metric the monitors' rollup retention.
 */
function checkWindow(deps: Pick<RouteDeps<OpsServices>, 'clock' | 'config' | 'services'>, windowMs: number, metric: string, field = 'window'): void {
  const bucket = deps.config.ops.bucket;
  if (windowMs < bucket) throw new InvalidInput([{ field, message: `must be at least one bucket (ops.bucket = ${formatDuration(bucket)})` }]);
  if (isMonitorMetric(metric)) {
    const keep = deps.config.channel_monitor.rollup_retention;
    if (windowMs > keep) throw new InvalidInput([{ field, message: `must not exceed the monitors' rollup retention (channel_monitor.rollup_retention = ${formatDuration(keep)})` }]);
  } else {
    const keepDays = deps.config.ops.retention_days.ops_metrics_minute;
    const keepMs = keepDays > 0 ? keepDays * DAY : Infinity;
    if (windowMs > keepMs) throw new InvalidInput([{ field, message: `must not exceed the minute series' retention (${keepDays} days)` }]);
  }
  if (windowMs % 1000) throw new InvalidInput([{ field, message: 'must be a whole number of seconds' }]);
}

export function ruleView(r: AlertRule) {
  return { ...r, window: formatDuration(r.window_seconds * 1000), cooldown: formatDuration(r.cooldown_seconds * 1000) };
}

function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: string })?.code === '23505';
}

/** Alert rules (CRUD), alert events, silences. */
export function registerOpsAlertRoutes(api: FastifyInstance, deps: Pick<RouteDeps<OpsServices>, 'clock' | 'config' | 'services'>): void {
  const { alerts, silences } = deps.services.ops;
  const invalidRule =
    'invalid input, each error naming its field: a malformed body, a name already taken, a window shorter than a bucket or longer than its series is kept, a selector on a metric other than `monitor_*`, a monitor that does not exist';

  route(api, { method: 'GET', path: '/ops/alert-rules', operationId: 'listOpsAlertRules', summary: 'Alert rules', tag, responses: { 200: json(OpsAlertRuleList) } }, async () => ({
    rules: (await alerts.rules()).map(ruleView),
  }));
  route(
    api,
    {
      method: 'GET',
      path: '/ops/alert-rules/:id',
      operationId: 'getOpsAlertRule',
      summary: 'An alert rule',
      tag,
      params: RuleParams,
      responses: { 200: json(OpsAlertRule) },
      errors: { 404: 'no alert rule with this id' },
    },
    async ({ params }) => {
      const r = await alerts.rule(parseId(params.id) ?? 0);
      return r ? ruleView(r) : notFound(`no alert rule ${params.id}`);
    },
  );
  route(
    api,
    {
      method: 'POST',
      path: '/ops/alert-rules',
      operationId: 'createOpsAlertRule',
      summary: 'Create an alert rule',
      description: "The window must span at least one bucket and stay inside the series' retention; only `monitor_*` metrics take a selector.",
      tag,
      body: ruleCreate,
      responses: { 201: json(OpsAlertRule) },
      errors: { 400: invalidRule },
    },
    async ({ body: b }, _req, reply) => {
      checkWindow(deps, b.window, b.metric);
      await checkMonitorRule(deps.services.ops.monitorWindows, b);
      const input: RuleInput = {
        name: b.name,
        metric: b.metric,
        operator: b.operator,
        threshold: b.threshold,
        window_seconds: b.window / 1000,
        sustained: b.sustained,
        severity: b.severity,
        cooldown_seconds: Math.round(b.cooldown / 1000),
        labels: b.labels,
        selector: b.selector,
        enabled: b.enabled,
        notify: b.notify,
      };
      try {
        return reply.code(201).send(ruleView(await alerts.createRule(input)));
      } catch (err) {
        if (isUniqueViolation(err)) throw new InvalidInput([{ field: 'name', message: `a rule named ${JSON.stringify(b.name)} exists` }]);
        throw err;
      }
    },
  );
  route(
    api,
    {
      method: 'PATCH',
      path: '/ops/alert-rules/:id',
      operationId: 'updateOpsAlertRule',
      summary: 'Change an alert rule',
      tag,
      params: RuleParams,
      body: rulePatch,
      responses: { 200: json(OpsAlertRule) },
      errors: { 400: invalidRule, 404: 'no alert rule with this id' },
    },
    async ({ params, body: b }) => {
      const id = parseId(params.id) ?? 0;
      const current = await alerts.rule(id);
      if (!current) return notFound(`no alert rule ${params.id}`);
      const metric = b.metric ?? current.metric;
      if (b.window !== undefined || b.metric !== undefined) checkWindow(deps, b.window ?? current.window_seconds * 1000, metric);
      if (b.metric !== undefined || b.selector !== undefined || b.labels !== undefined)
        await checkMonitorRule(deps.services.ops.monitorWindows, { metric, selector: b.selector === undefined ? current.selector : b.selector, labels: b.labels ?? current.labels });
      const { window, cooldown, ...rest } = b;
      const patch: Partial<RuleInput> = {
        ...rest,
        ...(window !== undefined ? { window_seconds: window / 1000 } : {}),
        ...(cooldown !== undefined ? { cooldown_seconds: Math.round(cooldown / 1000) } : {}),
      };
      try {
        const r = await alerts.updateRule(id, patch);
        return r ? ruleView(r) : notFound(`no alert rule ${params.id}`);
      } catch (err) {
        if (isUniqueViolation(err)) throw new InvalidInput([{ field: 'name', message: `a rule named ${JSON.stringify(b.name)} exists` }]);
        throw err;
      }
    },
  );
  route(
    api,
    {
      method: 'DELETE',
      path: '/ops/alert-rules/:id',
      operationId: 'deleteOpsAlertRule',
      summary: 'Delete an alert rule',
      tag,
      params: RuleParams,
      responses: { 204: empty() },
      errors: { 404: 'no alert rule with this id' },
    },
    async ({ params }, _req, reply) => {
      if (!(await alerts.deleteRule(parseId(params.id) ?? 0))) return notFound(`no alert rule ${params.id}`);
      return reply.code(204).send();
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/ops/alert-events',
      operationId: 'listOpsAlertEvents',
      summary: 'Alert events, newest first',
      tag,
      query: eventsQuery,
      prefixes: { query: 'query' },
      responses: { 200: json(OpsAlertEventList) },
    },
    async ({ query: q }) => ({ events: await alerts.events({ state: q.state, limit: q.limit }) }),
  );

  route(
    api,
    {
      method: 'GET',
      path: '/ops/silences',
      operationId: 'listOpsSilences',
      summary: 'Silences not yet ended (every one with all=true)',
      tag,
      query: silencesQuery,
      responses: { 200: json(OpsSilenceList) },
    },
    async ({ query }) => ({ silences: await silences.list(query.all === 'true') }),
  );
  route(
    api,
    {
      method: 'POST',
      path: '/ops/silences',
      operationId: 'createOpsSilence',
      summary: 'Silence alerts of a rule or of label matchers for a time range',
      description: 'Give rule_id or at least one label matcher; a silence of everything is refused.',
      tag,
      body: silenceBody,
      responses: { 201: json(OpsSilence) },
    },
    async ({ body: b }, _req, reply) => {
      const starts = b.starts_at ?? new Date(deps.clock.now()).toISOString();
      if (Date.parse(b.ends_at) <= Date.parse(starts)) throw new InvalidInput([{ field: 'ends_at', message: 'must be after starts_at' }]);
      if (b.rule_id === null && !Object.keys(b.matchers).length)
        throw new InvalidInput([{ field: 'matchers', message: 'give rule_id or at least one label matcher (a silence of everything is not allowed)' }]);
      if (b.rule_id !== null && !(await alerts.rule(b.rule_id))) throw new InvalidInput([{ field: 'rule_id', message: `no alert rule ${b.rule_id}` }]);
      return reply.code(201).send(await silences.create({ rule_id: b.rule_id, matchers: b.matchers, starts_at: starts, ends_at: b.ends_at, reason: b.reason, author: b.author }));
    },
  );
  route(
    api,
    {
      method: 'DELETE',
      path: '/ops/silences/:id',
      operationId: 'deleteOpsSilence',
      summary: 'Delete a silence',
      tag,
      params: IdParams('silence'),
      responses: { 204: empty() },
      errors: { 404: 'no silence with this id' },
    },
    async ({ params }, _req, reply) => {
      if (!(await silences.delete(parseId(params.id) ?? 0))) return notFound(`no silence ${params.id}`);
      return reply.code(204).send();
    },
  );
}

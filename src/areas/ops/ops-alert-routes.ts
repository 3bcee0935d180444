import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { OpsServices } from './wiring.js';
import { parseDuration, formatDuration } from '../../config/duration.js';
import { SERIES, SERIES_NAMES } from './catalogue.js';
import { OPERATORS, SEVERITIES } from './alert-logic.js';
import { isMonitorMetric, MONITOR_METRIC_NAMES } from './monitor-series.js';
import { checkMonitorRule, selectorShape } from './monitor-rule-check.js';
import type { AlertRule, RuleInput } from './store/ops-alerts.js';
import { parseBody, parseId } from '../../http/validation.js';
import { notFound, InvalidInput } from '../../errors/app-error.js';

const DAY = 86_400_000;
const when = z.iso.datetime({ offset: true, message: 'expected an ISO 8601 date-time such as 2026-11-30T00:00:00Z' });
const dur = z.union([z.string(), z.number()]).transform((v, ctx) => {
  const ms = parseDuration(v);
  if (ms === null) {
    ctx.addIssue({ code: 'custom', message: 'expected a duration such as 30s, 5m, 1h (a bare number means seconds)' });
    return z.NEVER;
  }
  return ms;
});
const labels = z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,62}$/, 'expected a label name of letters, digits, _'), z.string().max(200));
const ruleShape = {
  name: z.string().min(1).max(200),
  metric: z.string().refine((m) => m in SERIES || isMonitorMetric(m), { message: `unknown metric; known: ${[...SERIES_NAMES, ...MONITOR_METRIC_NAMES].join(', ')}` }),
  operator: z.enum(OPERATORS, { message: `expected one of ${OPERATORS.join(' ')}` }),
  threshold: z.number({ message: 'expected a number' }).finite(),
  window: dur,
  sustained: z.number().int('expected a whole number of evaluations').min(1).max(10_000),
  severity: z.enum(SEVERITIES, { message: `expected one of ${SEVERITIES.join(', ')}` }),
  cooldown: dur,
  labels,
  selector: selectorShape(labels),
  enabled: z.boolean(),
  notify: z.boolean(),
};
const ruleCreate = z
  .object({
    ...ruleShape,
    sustained: ruleShape.sustained.default(1),
    cooldown: ruleShape.cooldown.default(0),
    labels: labels.default({}),
    selector: ruleShape.selector.default(null),
    enabled: z.boolean().default(true),
    notify: z.boolean().default(true),
  })
  .strict();
const rulePatch = z.object(ruleShape).partial().strict();
const silenceBody = z
  .object({
    rule_id: z.number().int().positive().nullable().default(null),
    matchers: labels.default({}),
    starts_at: when.optional(),
    ends_at: when,
    reason: z.string().min(1).max(1000),
    author: z.string().min(1).max(200),
  })
  .strict();
const eventsQuery = z.object({ state: z.enum(['firing', 'resolved']).optional(), limit: z.coerce.number().int().min(1).max(1000).default(100) }).strict();

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

  api.get('/ops/alert-rules', async () => ({ rules: (await alerts.rules()).map(ruleView) }));
  api.get<{ Params: { id: string } }>('/ops/alert-rules/:id', async (req) => {
    const r = await alerts.rule(parseId(req.params.id) ?? 0);
    return r ? ruleView(r) : notFound(`no alert rule ${req.params.id}`);
  });
  api.post('/ops/alert-rules', async (req, reply) => {
    const b = parseBody(ruleCreate, req.body);
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
  });
  api.patch<{ Params: { id: string } }>('/ops/alert-rules/:id', async (req) => {
    const b = parseBody(rulePatch, req.body);
    const id = parseId(req.params.id) ?? 0;
    const current = await alerts.rule(id);
    if (!current) return notFound(`no alert rule ${req.params.id}`);
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
      return r ? ruleView(r) : notFound(`no alert rule ${req.params.id}`);
    } catch (err) {
      if (isUniqueViolation(err)) throw new InvalidInput([{ field: 'name', message: `a rule named ${JSON.stringify(b.name)} exists` }]);
      throw err;
    }
  });
  api.delete<{ Params: { id: string } }>('/ops/alert-rules/:id', async (req, reply) => {
    if (!(await alerts.deleteRule(parseId(req.params.id) ?? 0))) return notFound(`no alert rule ${req.params.id}`);
    return reply.code(204).send();
  });

  api.get('/ops/alert-events', async (req) => {
    const q = parseBody(eventsQuery, req.query, 'query');
    return { events: await alerts.events({ state: q.state, limit: q.limit }) };
  });

  api.get('/ops/silences', async (req) => ({ silences: await silences.list((req.query as { all?: string }).all === 'true') }));
  api.post('/ops/silences', async (req, reply) => {
    const b = parseBody(silenceBody, req.body);
    const starts = b.starts_at ?? new Date(deps.clock.now()).toISOString();
    if (Date.parse(b.ends_at) <= Date.parse(starts)) throw new InvalidInput([{ field: 'ends_at', message: 'must be after starts_at' }]);
    if (b.rule_id === null && !Object.keys(b.matchers).length)
      throw new InvalidInput([{ field: 'matchers', message: 'give rule_id or at least one label matcher (a silence of everything is not allowed)' }]);
    if (b.rule_id !== null && !(await alerts.rule(b.rule_id))) throw new InvalidInput([{ field: 'rule_id', message: `no alert rule ${b.rule_id}` }]);
    return reply.code(201).send(await silences.create({ rule_id: b.rule_id, matchers: b.matchers, starts_at: starts, ends_at: b.ends_at, reason: b.reason, author: b.author }));
  });
  api.delete<{ Params: { id: string } }>('/ops/silences/:id', async (req, reply) => {
    if (!(await silences.delete(parseId(req.params.id) ?? 0))) return notFound(`no silence ${req.params.id}`);
    return reply.code(204).send();
  });
}

import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { OpsServices } from './wiring.js';
import { REPORT_KINDS, type ReportInput } from './store/ops-reports.js';
import { CLEANUP_TARGETS } from './store/ops-retention.js';
import { chooseGranularity } from './granularity.js';
import { cronProblem, nextOccurrences } from './report-schedule.js';
import { overview } from './overview.js';
import { registerOpsAlertRoutes } from './ops-alert-routes.js';
import { parseBody, parseId } from '../../http/validation.js';
import { notFound, InvalidInput } from '../../errors/app-error.js';

const when = z.iso.datetime({ offset: true, message: 'expected an ISO 8601 date-time such as 2026-11-30T00:00:00Z' });
const metricsQuery = z.object({ from: when.optional(), to: when.optional(), step: z.enum(['minute', 'hour', 'day']).optional(), instances: z.enum(['true', 'false']).optional() }).strict();
const recipient = z.string().refine((r) => r === 'webhook' || /^[^@\s]+@[^@\s]+$/.test(r), { message: 'expected an e-mail address or "webhook"' });
const reportShape = {
  name: z.string().min(1).max(200),
  kind: z.enum(REPORT_KINDS, { message: `expected one of ${REPORT_KINDS.join(', ')}` }),
  cron: z.string().min(1).max(200),
  timezone: z.string().min(1).max(100),
  recipients: z.array(recipient).min(1, 'expected at least one recipient').max(100),
  params: z.object({ min_count: z.number().int().min(1).optional(), error_rate_threshold: z.number().min(0).max(1).optional() }).strict(),
  enabled: z.boolean(),
};
const reportCreate = z.object({ ...reportShape, timezone: reportShape.timezone.default('UTC'), params: reportShape.params.default({}), enabled: z.boolean().default(true) }).strict();
const reportPatch = z.object(reportShape).partial().strict();
const retentionBody = z.record(
  z.string().refine((t) => t in CLEANUP_TARGETS, { message: `unknown target; known: ${Object.keys(CLEANUP_TARGETS).join(', ')}` }),
  z.number({ message: 'expected a whole number of days' }).int('expected a whole number of days').min(-1, 'expected -1 (skip), 0 (empty) or a number of days'),
);

function checkCron(cron: string | undefined, timezone: string | undefined, now: number): void {
  if (cron === undefined) return;
  const problem = cronProblem(cron, timezone ?? 'UTC', new Date(now));
  if (problem) throw new InvalidInput([{ field: problem.startsWith('unknown time zone') ? 'timezone' : 'cron', message: problem }]);
}

/** The ops plane: series, overview, reports, retention; alert rules, events and silences. */
export function registerOpsRoutes(api: FastifyInstance, deps: Pick<RouteDeps<OpsServices>, 'clock' | 'config' | 'instances' | 'jobViews' | 'services'>): void {
  const ops = deps.services.ops;
  registerOpsAlertRoutes(api, deps);

  api.get('/ops/metrics', async (req) => {
    const q = parseBody(metricsQuery, req.query, 'query');
    const to = q.to ? new Date(q.to) : new Date(deps.clock.now());
    const from = q.from ? new Date(q.from) : new Date(to.getTime() - 3_600_000);
    if (to <= from) throw new InvalidInput([{ field: 'query.to', message: 'must be after from' }]);
    const { granularity } = chooseGranularity(from, to, q.step);
    const points = await ops.series.range(granularity, from, to, undefined, q.instances === 'true');
    return { step: granularity, from: from.toISOString(), to: to.toISOString(), bucket_seconds: deps.config.ops.bucket / 1000, points };
  });

  api.get('/ops/overview', async () => {
    const jobs = await deps.jobViews();
    return overview({ ops, bucketMs: deps.config.ops.bucket, alertIntervalMs: deps.config.ops.alert_interval, now: deps.clock.now(), jobs, instances: await deps.instances() });
  });

  api.get('/ops/reports', async () => ({ reports: await ops.reports.list() }));
  api.get<{ Params: { id: string } }>('/ops/reports/:id', async (req) => {
    const r = await ops.reports.get(parseId(req.params.id) ?? 0);
    if (!r) return notFound(`no report ${req.params.id}`);
    const now = new Date(deps.clock.now());
    return { ...r, next: nextOccurrences(r.cron, r.timezone, now, 5).map((d) => d.toISOString()), runs: await ops.reports.runs(r.id) };
  });
  api.post('/ops/reports', async (req, reply) => {
    const b = parseBody(reportCreate, req.body);
    checkCron(b.cron, b.timezone, deps.clock.now());
    try {
      return reply.code(201).send(await ops.reports.create(b as ReportInput));
    } catch (err) {
      if ((err as { code?: string }).code === '23505') throw new InvalidInput([{ field: 'name', message: `a report named ${JSON.stringify(b.name)} exists` }]);
      throw err;
    }
  });
  api.patch<{ Params: { id: string } }>('/ops/reports/:id', async (req) => {
    const b = parseBody(reportPatch, req.body);
    const id = parseId(req.params.id) ?? 0;
    const cur = await ops.reports.get(id);
    if (!cur) return notFound(`no report ${req.params.id}`);
    if (b.cron !== undefined || b.timezone !== undefined) checkCron(b.cron ?? cur.cron, b.timezone ?? cur.timezone, deps.clock.now());
    return ops.reports.update(id, b as Partial<ReportInput>);
  });
  api.delete<{ Params: { id: string } }>('/ops/reports/:id', async (req, reply) => {
    if (!(await ops.reports.delete(parseId(req.params.id) ?? 0))) return notFound(`no report ${req.params.id}`);
    return reply.code(204).send();
  });

  api.get('/ops/retention', async () => {
    const overrides = await ops.retention.overrides();
    return { targets: Object.keys(CLEANUP_TARGETS).map((t) => ({ target: t, days: overrides[t] ?? deps.config.ops.retention_days[t] ?? null, source: t in overrides ? 'api' : 'config' })) };
  });
  api.put('/ops/retention', async (req) => {
    const b = parseBody(retentionBody, req.body);
    await ops.retention.put(b);
    const overrides = await ops.retention.overrides();
    return { targets: Object.keys(CLEANUP_TARGETS).map((t) => ({ target: t, days: overrides[t] ?? deps.config.ops.retention_days[t] ?? null, source: t in overrides ? 'api' : 'config' })) };
  });
}

import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../../modules/area.js';
import type { OpsServices } from './wiring.js';
import type { ReportInput } from './store/ops-reports.js';
import { CLEANUP_TARGETS } from './store/ops-retention.js';
import { chooseGranularity } from './granularity.js';
import { cronProblem, nextOccurrences } from './report-schedule.js';
import { overview } from './overview.js';
import { registerOpsAlertRoutes } from './ops-alert-routes.js';
import { IdParams, metricsQuery, OpsMetrics, OpsOverview, OpsReport, OpsReportDetail, OpsReportList, OpsRetention, reportCreate, reportPatch, retentionBody } from './ops-contracts.js';
import { empty, json, route } from '../../http/contract.js';
import { parseId } from '../../http/validation.js';
import { notFound, InvalidInput } from '../../errors/app-error.js';

const tag = 'ops';
const ReportParams = IdParams('report');

function checkCron(cron: string | undefined, timezone: string | undefined, now: number): void {
  if (cron === undefined) return;
  const problem = cronProblem(cron, timezone ?? 'UTC', new Date(now));
  if (problem) throw new InvalidInput([{ field: problem.startsWith('unknown time zone') ? 'timezone' : 'cron', message: problem }]);
}

/** The ops plane: series, overview, reports, retention; alert rules, events and silences. */
export function registerOpsRoutes(api: FastifyInstance, deps: Pick<RouteDeps<OpsServices>, 'clock' | 'config' | 'instances' | 'jobViews' | 'services'>): void {
  const ops = deps.services.ops;
  registerOpsAlertRoutes(api, deps);

  route(
    api,
    {
      method: 'GET',
      path: '/ops/metrics',
      operationId: 'getOpsMetrics',
      summary: 'The ops series of a range, by minute, hour or day',
      description: 'Without from/to: the last hour. The step is chosen from the range unless given.',
      tag,
      query: metricsQuery,
      prefixes: { query: 'query' },
      responses: { 200: json(OpsMetrics) },
    },
    async ({ query: q }) => {
      const to = q.to ? new Date(q.to) : new Date(deps.clock.now());
      const from = q.from ? new Date(q.from) : new Date(to.getTime() - 3_600_000);
      if (to <= from) throw new InvalidInput([{ field: 'query.to', message: 'must be after from' }]);
      const { granularity } = chooseGranularity(from, to, q.step);
      const points = await ops.series.range(granularity, from, to, undefined, q.instances === 'true');
      return { step: granularity, from: from.toISOString(), to: to.toISOString(), bucket_seconds: deps.config.ops.bucket / 1000, points };
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/ops/overview',
      operationId: 'getOpsOverview',
      summary: 'The cluster at a glance: health score and its parts, firing alerts, jobs, replicas',
      tag,
      responses: { 200: json(OpsOverview) },
    },
    async () => {
      const jobs = await deps.jobViews();
      return overview({ ops, bucketMs: deps.config.ops.bucket, alertIntervalMs: deps.config.ops.alert_interval, now: deps.clock.now(), jobs, instances: await deps.instances() });
    },
  );

  route(api, { method: 'GET', path: '/ops/reports', operationId: 'listOpsReports', summary: 'Scheduled reports', tag, responses: { 200: json(OpsReportList) } }, async () => ({
    reports: await ops.reports.list(),
  }));
  route(
    api,
    {
      method: 'GET',
      path: '/ops/reports/:id',
      operationId: 'getOpsReport',
      summary: 'A scheduled report, its next occurrences and its recorded runs',
      tag,
      params: ReportParams,
      responses: { 200: json(OpsReportDetail) },
      errors: { 404: 'no report with this id' },
    },
    async ({ params }) => {
      const r = await ops.reports.get(parseId(params.id) ?? 0);
      if (!r) return notFound(`no report ${params.id}`);
      const now = new Date(deps.clock.now());
      return { ...r, next: nextOccurrences(r.cron, r.timezone, now, 5).map((d) => d.toISOString()), runs: await ops.reports.runs(r.id) };
    },
  );
  route(
    api,
    {
      method: 'POST',
      path: '/ops/reports',
      operationId: 'createOpsReport',
      summary: 'Create a scheduled report',
      description: 'A bad cron or time zone, or a name already taken, is a 400 naming the field.',
      tag,
      body: reportCreate,
      responses: { 201: json(OpsReport) },
    },
    async ({ body: b }, _req, reply) => {
      checkCron(b.cron, b.timezone, deps.clock.now());
      try {
        return reply.code(201).send(await ops.reports.create(b as ReportInput));
      } catch (err) {
        if ((err as { code?: string }).code === '23505') throw new InvalidInput([{ field: 'name', message: `a report named ${JSON.stringify(b.name)} exists` }]);
        throw err;
      }
    },
  );
  route(
    api,
    {
      method: 'PATCH',
      path: '/ops/reports/:id',
      operationId: 'updateOpsReport',
      summary: 'Change a scheduled report',
      tag,
      params: ReportParams,
      body: reportPatch,
      responses: { 200: json(OpsReport) },
      errors: { 404: 'no report with this id' },
    },
    async ({ params, body: b }) => {
      const id = parseId(params.id) ?? 0;
      const cur = await ops.reports.get(id);
      if (!cur) return notFound(`no report ${params.id}`);
      if (b.cron !== undefined || b.timezone !== undefined) checkCron(b.cron ?? cur.cron, b.timezone ?? cur.timezone, deps.clock.now());
      return ops.reports.update(id, b as Partial<ReportInput>);
    },
  );
  route(
    api,
    {
      method: 'DELETE',
      path: '/ops/reports/:id',
      operationId: 'deleteOpsReport',
      summary: 'Delete a scheduled report',
      tag,
      params: ReportParams,
      responses: { 204: empty() },
      errors: { 404: 'no report with this id' },
    },
    async ({ params }, _req, reply) => {
      if (!(await ops.reports.delete(parseId(params.id) ?? 0))) return notFound(`no report ${params.id}`);
      return reply.code(204).send();
    },
  );

  const retention = async () => {
    const overrides = await ops.retention.overrides();
    return { targets: Object.keys(CLEANUP_TARGETS).map((t) => ({ target: t, days: overrides[t] ?? deps.config.ops.retention_days[t] ?? null, source: t in overrides ? 'api' : 'config' })) };
  };
  route(
    api,
    { method: 'GET', path: '/ops/retention', operationId: 'getOpsRetention', summary: 'Days kept per cleanup target, and where each setting comes from', tag, responses: { 200: json(OpsRetention) } },
    retention,
  );
  route(
    api,
    {
      method: 'PUT',
      path: '/ops/retention',
      operationId: 'setOpsRetention',
      summary: 'Override the days kept of some cleanup targets',
      description: 'Targets left out keep their setting. Answers every target, as the GET does.',
      tag,
      body: retentionBody,
      responses: { 200: json(OpsRetention) },
    },
    async ({ body }) => {
      await ops.retention.put(body);
      return retention();
    },
  );
}

import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../../modules/area.js';
import type { ProbeServices } from './wiring.js';
import type { AccountsFace } from '../accounts/index.js';
import type { PlanInput } from './store/account-tests.js';
import { checkPlanSchedule } from './plan-schedule.js';
import { InvalidInput, notFound } from '../../errors/app-error.js';
import { parseId } from '../../http/validation.js';
import { empty, json, route } from '../../http/contract.js';
import { IdParams, Plan, PlanAudit, PlanList, PlanWithResults, newPlanSchema, patchPlanSchema, planPageQuery } from './probes-contracts.js';

const tag = 'monitors';
const NO_PLAN = 'no account test plan with this id';

/** Scheduled account-test plans: CRUD, their latest results, and the account's audit. */
export function registerAccountTestRoutes(api: FastifyInstance, deps: Pick<RouteDeps<ProbeServices & Pick<AccountsFace, 'accounts' | 'tokens'>>, 'clock' | 'config' | 'log' | 'services'>): void {
  const { accountTests, accounts } = deps.services;

  async function check(p: PlanInput): Promise<void> {
    if (!(await accounts.get(p.accountId))) throw new InvalidInput([{ field: 'account_id', message: `no account ${p.accountId}` }]);
    const bad = checkPlanSchedule(p.cron, p.timezone, deps.clock.now(), deps.config.channel_monitor.min_interval);
    if (bad) throw new InvalidInput([bad]);
  }

  route(
    api,
    {
      method: 'POST',
      path: '/account-tests',
      operationId: 'createAccountTestPlan',
      summary: 'Test an account on a cron schedule (tested at once, then on its phase slots)',
      tag,
      body: newPlanSchema,
      responses: { 201: json(Plan) },
    },
    async ({ body: b }, _req, reply) => {
      const p: PlanInput = {
        accountId: b.account_id,
        cron: b.cron,
        timezone: b.timezone ?? 'UTC',
        model: b.model,
        maxResults: b.max_results ?? 50,
        autoRecover: b.auto_recover ?? false,
        enabled: b.enabled ?? true,
      };
      await check(p);
      // Tested at once, then on its phase slots (issue 24).
      const view = await accountTests.create(p);
      deps.log.info({ plan_id: view.id, account_id: p.accountId }, 'account test plan created');
      return reply.code(201).send(view);
    },
  );

  route(
    api,
    { method: 'GET', path: '/account-tests', operationId: 'listAccountTestPlans', summary: 'Scheduled account-test plans, by id', tag, query: planPageQuery, responses: { 200: json(PlanList) } },
    async ({ query }) => {
      const limit = Math.min(1000, Math.max(1, query.limit || 100));
      const accountId = query.account_id ? (parseId(query.account_id) ?? -1) : undefined;
      return { plans: await accountTests.list({ afterId: query.after_id || 0, limit, accountId }) };
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/account-tests/:id',
      operationId: 'getAccountTestPlan',
      summary: 'A plan with its latest results',
      tag,
      params: IdParams,
      responses: { 200: json(PlanWithResults) },
      errors: { 404: NO_PLAN },
    },
    async ({ params }) => {
      const n = parseId(params.id);
      const plan = n && (await accountTests.get(n));
      if (!plan) return notFound(`no account test plan ${params.id}`);
      return { ...plan, results: await accountTests.results(plan.id, plan.max_results) };
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/account-tests/:id/audit',
      operationId: 'getAccountTestAudit',
      summary: "The audit of the plan's account (what tests did to it)",
      tag,
      params: IdParams,
      responses: { 200: json(PlanAudit) },
      errors: { 404: NO_PLAN },
    },
    async ({ params }) => {
      const n = parseId(params.id);
      const plan = n && (await accountTests.get(n));
      if (!plan) return notFound(`no account test plan ${params.id}`);
      return { account_id: plan.account_id, audit: await accountTests.audit(plan.account_id, 100) };
    },
  );

  route(
    api,
    {
      method: 'PATCH',
      path: '/account-tests/:id',
      operationId: 'updateAccountTestPlan',
      summary: 'Change a plan (a change of when, what or with which account is tested at once)',
      tag,
      params: IdParams,
      body: patchPlanSchema,
      responses: { 200: json(Plan) },
      errors: { 404: NO_PLAN },
    },
    async ({ params, body: b }) => {
      const n = parseId(params.id);
      const cur = n && (await accountTests.get(n));
      if (!cur) return notFound(`no account test plan ${params.id}`);
      const merged: PlanInput = {
        accountId: b.account_id ?? cur.account_id,
        cron: b.cron ?? cur.cron,
        timezone: b.timezone ?? cur.timezone,
        model: b.model ?? cur.model,
        maxResults: b.max_results ?? cur.max_results,
        autoRecover: b.auto_recover ?? cur.auto_recover,
        enabled: b.enabled ?? cur.enabled,
      };
      await check(merged);
      // An edit of when, what or with which account it tests is tested at once, then on its phase slots.
      const reschedule = b.cron !== undefined || b.timezone !== undefined || b.enabled === true || b.account_id !== undefined || b.model !== undefined;
      const view = await accountTests.update(
        cur.id,
        { accountId: b.account_id, cron: b.cron, timezone: b.timezone, model: b.model, maxResults: b.max_results, autoRecover: b.auto_recover, enabled: b.enabled },
        reschedule,
      );
      deps.log.info({ plan_id: cur.id, fields: Object.keys(b) }, 'account test plan updated');
      return view;
    },
  );

  route(
    api,
    {
      method: 'DELETE',
      path: '/account-tests/:id',
      operationId: 'deleteAccountTestPlan',
      summary: 'Delete a plan and its results',
      tag,
      params: IdParams,
      responses: { 204: empty() },
      errors: { 404: NO_PLAN },
    },
    async ({ params }, _req, reply) => {
      const n = parseId(params.id);
      if (!n || !(await accountTests.delete(n))) return notFound(`no account test plan ${params.id}`);
      return reply.code(204).send();
    },
  );
}

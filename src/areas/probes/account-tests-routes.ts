import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { ProbeServices } from './wiring.js';
import type { AccountsFace } from '../accounts/index.js';
import type { PlanInput } from './store/account-tests.js';
import { checkPlanSchedule } from './plan-schedule.js';
import { id } from '../../http/field-schemas.js';
import { InvalidInput, notFound } from '../../errors/app-error.js';
import { parseBody, parseId } from '../../http/validation.js';

const fields = {
  account_id: id,
  cron: z.string().min(1).max(200),
  timezone: z.string().min(1).max(64),
  model: z.string().min(1).max(200),
  max_results: z.number().int().min(1).max(1000),
  auto_recover: z.boolean(),
  enabled: z.boolean(),
};
const newSchema = z.object(fields).partial().required({ account_id: true, cron: true, model: true }).strict();
const patchSchema = z.object(fields).partial().strict();

/** Scheduled account-test plans: CRUD, their latest results, and the account's audit. */
export function registerAccountTestRoutes(api: FastifyInstance, deps: Pick<RouteDeps<ProbeServices & Pick<AccountsFace, 'accounts' | 'tokens'>>, 'clock' | 'config' | 'log' | 'services'>): void {
  const { accountTests, accounts } = deps.services;

  async function check(p: PlanInput): Promise<void> {
    if (!(await accounts.get(p.accountId))) throw new InvalidInput([{ field: 'account_id', message: `no account ${p.accountId}` }]);
    const bad = checkPlanSchedule(p.cron, p.timezone, deps.clock.now(), deps.config.channel_monitor.min_interval);
    if (bad) throw new InvalidInput([bad]);
  }

  api.post('/account-tests', async (req, reply) => {
    const b = parseBody(newSchema, req.body);
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
  });

  api.get<{ Querystring: { after_id?: string; limit?: string; account_id?: string } }>('/account-tests', async (req) => {
    const limit = Math.min(1000, Math.max(1, Number(req.query.limit ?? 100) || 100));
    const accountId = req.query.account_id ? (parseId(req.query.account_id) ?? -1) : undefined;
    return { plans: await accountTests.list({ afterId: Number(req.query.after_id ?? 0) || 0, limit, accountId }) };
  });

  api.get<{ Params: { id: string } }>('/account-tests/:id', async (req) => {
    const n = parseId(req.params.id);
    const plan = n && (await accountTests.get(n));
    if (!plan) return notFound(`no account test plan ${req.params.id}`);
    return { ...plan, results: await accountTests.results(plan.id, plan.max_results) };
  });

  api.get<{ Params: { id: string } }>('/account-tests/:id/audit', async (req) => {
    const n = parseId(req.params.id);
    const plan = n && (await accountTests.get(n));
    if (!plan) return notFound(`no account test plan ${req.params.id}`);
    return { account_id: plan.account_id, audit: await accountTests.audit(plan.account_id, 100) };
  });

  api.patch<{ Params: { id: string } }>('/account-tests/:id', async (req) => {
    const n = parseId(req.params.id);
    const b = parseBody(patchSchema, req.body);
    const cur = n && (await accountTests.get(n));
    if (!cur) return notFound(`no account test plan ${req.params.id}`);
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
  });

  api.delete<{ Params: { id: string } }>('/account-tests/:id', async (req, reply) => {
    const n = parseId(req.params.id);
    if (!n || !(await accountTests.delete(n))) return notFound(`no account test plan ${req.params.id}`);
    return reply.code(204).send();
  });
}

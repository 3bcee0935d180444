import { AppError, InvalidInput, Conflict, notFound } from '../../errors/app-error.js';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { BillingServices } from './wiring.js';
import { formatDuration } from '../../config/duration.js';
import { parseBody, parseId } from '../../http/validation.js';
import { reminderSettings } from './subscription-expiry.js';

const when = z.iso.datetime({ offset: true, message: 'expected an ISO 8601 date-time such as 2026-12-31T00:00:00Z' });
const money = z.number({ message: 'expected an integer amount in minor units (cents, fen)' }).int('expected an integer amount in minor units (cents, fen)');
const id = z.number().int().positive();

const userBody = z.object({ external_id: z.string().min(1).max(128).optional(), email: z.email('expected an e-mail address').optional() }).strict();
const planBody = z.object({ name: z.string().min(1).max(200), price: money.min(0), duration_days: z.number().int().min(1).max(3660) }).strict();
const subBody = z.object({ user_id: id, plan_id: id, starts_at: when.optional(), expires_at: when.optional() }).strict();
const orderBody = z
  .object({
    user_id: id,
    amount: money.min(1, 'expected a positive amount'),
    provider: z.string().min(1),
    provider_order_id: z.string().min(1).max(128).optional(),
    purpose: z.enum(['balance', 'subscription']),
    plan_id: id.optional(),
    expires_at: when.optional(),
  })
  .strict()
  .refine((o) => o.purpose === 'balance' || o.plan_id !== undefined, { message: 'a subscription order needs plan_id', path: ['plan_id'] });

/** Users, plans, subscriptions, orders and the notification log (admin), and the payment webhook (signed, no admin token). */
export function registerBillingRoutes(api: FastifyInstance, deps: Pick<RouteDeps<BillingServices>, 'clock' | 'config' | 'log' | 'services'>): void {
  const { billing, notifications, notifier, payments } = deps.services;

  api.post('/billing/users', async (req, reply) => {
    const b = parseBody(userBody, req.body);
    return reply.code(201).send(await billing.createUser({ externalId: b.external_id, email: b.email }));
  });
  api.get<{ Params: { id: string } }>('/billing/users/:id', async (req) => {
    const u = await billing.user(parseId(req.params.id) ?? 0);
    if (!u) return notFound(`no user ${req.params.id}`);
    return { ...u, subscriptions: await billing.subscriptionsOf(u.id as number) };
  });

  api.post('/billing/plans', async (req, reply) => {
    const b = parseBody(planBody, req.body);
    return reply.code(201).send(await billing.createPlan({ name: b.name, price: b.price, durationDays: b.duration_days }));
  });
  api.get('/billing/plans', async () => ({ plans: await billing.plans() }));

  api.post('/billing/subscriptions', async (req, reply) => {
    const b = parseBody(subBody, req.body);
    const [user, plan] = await Promise.all([billing.user(b.user_id), billing.plan(b.plan_id)]);
    const errors = [...(user ? [] : [{ field: 'user_id', message: `no user ${b.user_id}` }]), ...(plan ? [] : [{ field: 'plan_id', message: `no plan ${b.plan_id}` }])];
    if (errors.length) throw new InvalidInput(errors);
    const starts = new Date(b.starts_at ? Date.parse(b.starts_at) : deps.clock.now());
    const expires = b.expires_at ? new Date(b.expires_at) : new Date(starts.getTime() + (plan!.duration_days as number) * 86_400_000);
    if (expires <= starts) throw new InvalidInput([{ field: 'expires_at', message: 'must be after starts_at' }]);
    return reply.code(201).send(await billing.createSubscription({ userId: b.user_id, planId: b.plan_id, startsAt: starts, expiresAt: expires }));
  });
  api.get<{ Params: { id: string } }>('/billing/subscriptions/:id', async (req) => {
    const s = await billing.subscription(parseId(req.params.id) ?? 0);
    return s ?? notFound(`no subscription ${req.params.id}`);
  });
  api.post<{ Params: { id: string } }>('/billing/subscriptions/:id/cancel', async (req) => {
    const n = parseId(req.params.id) ?? 0;
    if (!(await billing.subscription(n))) return notFound(`no subscription ${req.params.id}`);
    if (!(await billing.cancelSubscription(n))) throw new Conflict('not_active', `subscription ${n} is not active`);
    return billing.subscription(n);
  });

  api.post('/billing/orders', async (req, reply) => {
    const b = parseBody(orderBody, req.body);
    const errors = [];
    if (!payments.providers.has(b.provider)) errors.push({ field: 'provider', message: `unknown payment provider ${JSON.stringify(b.provider)}; configure payments.providers.${b.provider}` });
    if (!(await billing.user(b.user_id))) errors.push({ field: 'user_id', message: `no user ${b.user_id}` });
    if (b.plan_id && !(await billing.plan(b.plan_id))) errors.push({ field: 'plan_id', message: `no plan ${b.plan_id}` });
    if (errors.length) throw new InvalidInput(errors);
    const order = await billing.createOrder({
      userId: b.user_id,
      amount: b.amount,
      currency: deps.config.billing.currency,
      provider: b.provider,
      providerOrderId: b.provider_order_id ?? null,
      purpose: b.purpose,
      planId: b.plan_id ?? null,
      expiresAt: b.expires_at ? new Date(b.expires_at) : new Date(deps.clock.now() + deps.config.billing.order_ttl),
    });
    return reply.code(201).send(order);
  });
  api.get<{ Params: { id: string } }>('/billing/orders/:id', async (req) => {
    const o = await billing.order(parseId(req.params.id) ?? 0);
    if (!o) return notFound(`no order ${req.params.id}`);
    return { ...o, events: await billing.orderEvents(o.id) };
  });

  api.get('/notifications', async (req) => {
    const q = parseBody(
      z.object({ status: z.enum(['pending', 'sending', 'sent', 'failed', 'skipped']).optional(), limit: z.coerce.number().int().min(1).max(1000).default(100) }).strict(),
      req.query,
      'query',
    );
    return { deliveries: await notifications.list(q) };
  });
  // Each channel's health, its cluster-wide rate limit, and its outbox backlog (and how much of it waits for the limit).
  api.get('/notifications/channels', async () => {
    const backlog = await notifications.backlog();
    const limits: Record<string, { count: number; period: number }> = deps.config.notify.rate_limit;
    return {
      channels: Object.fromEntries(
        [...notifier.health].map(([name, h]) => [
          name,
          {
            ...h,
            rate_limit: limits[name]?.count ? { count: limits[name].count, period: formatDuration(limits[name].period) } : null,
            ...(backlog[name] ?? { backlog: 0, rate_limited: 0 }),
          },
        ]),
      ),
    };
  });

  api.get('/notifications/settings', async () => reminderSettings(deps.config, notifications));
  api.put('/notifications/settings', async (req) => {
    const b = parseBody(z.object({ reminders_enabled: z.boolean().optional(), reminder_days: z.array(z.number().int().min(1).max(365)).min(1).max(10).optional() }).strict(), req.body);
    await notifications.putSettings(b);
    deps.log.info({ settings: b }, 'notification settings changed');
    return reminderSettings(deps.config, notifications);
  });
}

/** The provider calls this; it carries no admin token, so the signature is the only authority. */
export function registerPaymentWebhook(app: FastifyInstance, deps: Pick<RouteDeps<BillingServices>, 'clock' | 'config' | 'log' | 'services'>): void {
  void app.register(
    async (pub) => {
      pub.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: 64 * 1024 }, (_req, body, done) => done(null, body));
      // An unknown provider is refused before its body is read: an unfinished body to a made-up name holds nothing.
      pub.addHook('onRequest', async (req, reply) => {
        const name = (req.params as { provider?: string }).provider;
        if (name !== undefined && !deps.services.payments.providers.has(name)) {
          void reply.header('connection', 'close');
          notFound('unknown payment provider', 'unknown_provider');
        }
      });
      pub.post<{ Params: { provider: string } }>('/webhook/:provider', async (req, reply) => {
        const raw = typeof req.body === 'string' ? req.body : '';
        const a = await deps.services.payments.webhook(req.params.provider, raw, req.headers);
        if (a.ok) return reply.code(200).send({ result: a.result, order_id: a.order_id });
        throw new AppError(a.kind, a.code, a.message);
      });
    },
    { prefix: '/api/v1/payments' },
  );
}

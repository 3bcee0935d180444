import { AppError, InvalidInput, Conflict, notFound } from '../../errors/app-error.js';
import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../../modules/area.js';
import type { BillingServices } from './wiring.js';
import { formatDuration } from '../../config/duration.js';
import { parseId } from '../../http/validation.js';
import { json, route } from '../../http/contract.js';
import { reminderSettings } from './subscription-expiry.js';
import {
  BillingUser,
  Channels,
  Deliveries,
  IdParams,
  Order,
  OrderWithEvents,
  Plan,
  PlanList,
  ProviderParams,
  ReminderSettings,
  Subscription,
  UserWithSubscriptions,
  WebhookEvent,
  WebhookResult,
  notificationsQuery,
  orderBody,
  planBody,
  settingsBody,
  subBody,
  userBody,
} from './billing-contracts.js';

const tag = 'billing';

/** Users, plans, subscriptions, orders and the notification log (admin), and the payment webhook (signed, no admin token). */
export function registerBillingRoutes(api: FastifyInstance, deps: Pick<RouteDeps<BillingServices>, 'clock' | 'config' | 'log' | 'services'>): void {
  const { billing, notifications, notifier, payments } = deps.services;

  route(
    api,
    {
      method: 'POST',
      path: '/billing/users',
      operationId: 'createBillingUser',
      summary: 'Add a billing user',
      tag,
      body: userBody,
      responses: { 201: json(BillingUser) },
      errors: { 409: 'a user with this external_id exists' },
    },
    async ({ body: b }, _req, reply) => reply.code(201).send(await billing.createUser({ externalId: b.external_id, email: b.email })),
  );
  route(
    api,
    {
      method: 'GET',
      path: '/billing/users/:id',
      operationId: 'getBillingUser',
      summary: 'A billing user with their subscriptions',
      tag,
      params: IdParams,
      responses: { 200: json(UserWithSubscriptions) },
      errors: { 404: 'no user with this id' },
    },
    async ({ params }) => {
      const u = await billing.user(parseId(params.id) ?? 0);
      if (!u) return notFound(`no user ${params.id}`);
      return { ...u, subscriptions: await billing.subscriptionsOf(u.id as number) };
    },
  );

  route(
    api,
    { method: 'POST', path: '/billing/plans', operationId: 'createBillingPlan', summary: 'Add a plan', tag, body: planBody, responses: { 201: json(Plan) } },
    async ({ body: b }, _req, reply) => reply.code(201).send(await billing.createPlan({ name: b.name, price: b.price, durationDays: b.duration_days })),
  );
  route(api, { method: 'GET', path: '/billing/plans', operationId: 'listBillingPlans', summary: 'Every plan', tag, responses: { 200: json(PlanList) } }, async () => ({
    plans: await billing.plans(),
  }));

  route(
    api,
    { method: 'POST', path: '/billing/subscriptions', operationId: 'createBillingSubscription', summary: 'Subscribe a user to a plan', tag, body: subBody, responses: { 201: json(Subscription) } },
    async ({ body: b }, _req, reply) => {
      const [user, plan] = await Promise.all([billing.user(b.user_id), billing.plan(b.plan_id)]);
      const errors = [...(user ? [] : [{ field: 'user_id', message: `no user ${b.user_id}` }]), ...(plan ? [] : [{ field: 'plan_id', message: `no plan ${b.plan_id}` }])];
      if (errors.length) throw new InvalidInput(errors);
      const starts = new Date(b.starts_at ? Date.parse(b.starts_at) : deps.clock.now());
      const expires = b.expires_at ? new Date(b.expires_at) : new Date(starts.getTime() + (plan!.duration_days as number) * 86_400_000);
      if (expires <= starts) throw new InvalidInput([{ field: 'expires_at', message: 'must be after starts_at' }]);
      return reply.code(201).send(await billing.createSubscription({ userId: b.user_id, planId: b.plan_id, startsAt: starts, expiresAt: expires }));
    },
  );
  route(
    api,
    {
      method: 'GET',
      path: '/billing/subscriptions/:id',
      operationId: 'getBillingSubscription',
      summary: 'One subscription',
      tag,
      params: IdParams,
      responses: { 200: json(Subscription) },
      errors: { 404: 'no subscription with this id' },
    },
    async ({ params }) => {
      const s = await billing.subscription(parseId(params.id) ?? 0);
      return s ?? notFound(`no subscription ${params.id}`);
    },
  );
  route(
    api,
    {
      method: 'POST',
      path: '/billing/subscriptions/:id/cancel',
      operationId: 'cancelBillingSubscription',
      summary: 'Cancel a subscription',
      tag,
      params: IdParams,
      responses: { 200: json(Subscription) },
      errors: { 404: 'no subscription with this id', 409: '`not_active`: it is not active' },
    },
    async ({ params }) => {
      const n = parseId(params.id) ?? 0;
      if (!(await billing.subscription(n))) return notFound(`no subscription ${params.id}`);
      if (!(await billing.cancelSubscription(n))) throw new Conflict('not_active', `subscription ${n} is not active`);
      return billing.subscription(n);
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/billing/orders',
      operationId: 'createBillingOrder',
      summary: 'Open a payment order (pending until paid or expired)',
      tag,
      body: orderBody,
      responses: { 201: json(Order) },
      errors: { 409: 'an order with this provider_order_id exists at the provider' },
    },
    async ({ body: b }, _req, reply) => {
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
    },
  );
  route(
    api,
    {
      method: 'GET',
      path: '/billing/orders/:id',
      operationId: 'getBillingOrder',
      summary: 'A payment order with its event trail',
      tag,
      params: IdParams,
      responses: { 200: json(OrderWithEvents) },
      errors: { 404: 'no order with this id' },
    },
    async ({ params }) => {
      const o = await billing.order(parseId(params.id) ?? 0);
      if (!o) return notFound(`no order ${params.id}`);
      return { ...o, events: await billing.orderEvents(o.id) };
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/notifications',
      operationId: 'listNotifications',
      summary: 'The notification delivery log, newest first',
      tag,
      query: notificationsQuery,
      prefixes: { query: 'query' },
      responses: { 200: json(Deliveries) },
    },
    async ({ query: q }) => ({ deliveries: await notifications.list(q) }),
  );
  // Each channel's health, its cluster-wide rate limit, and its outbox backlog (and how much of it waits for the limit).
  route(
    api,
    {
      method: 'GET',
      path: '/notifications/channels',
      operationId: 'listNotificationChannels',
      summary: "Each notification channel's health, rate limit and backlog",
      tag,
      responses: { 200: json(Channels) },
    },
    async () => {
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
    },
  );

  route(
    api,
    { method: 'GET', path: '/notifications/settings', operationId: 'getNotificationSettings', summary: 'Expiry reminder settings', tag, responses: { 200: json(ReminderSettings) } },
    async () => reminderSettings(deps.config, notifications),
  );
  route(
    api,
    {
      method: 'PUT',
      path: '/notifications/settings',
      operationId: 'putNotificationSettings',
      summary: 'Change the expiry reminder settings',
      tag,
      body: settingsBody,
      responses: { 200: json(ReminderSettings) },
    },
    async ({ body: b }) => {
      await notifications.putSettings(b);
      deps.log.info({ settings: b }, 'notification settings changed');
      return reminderSettings(deps.config, notifications);
    },
  );
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
      route(
        pub,
        {
          method: 'POST',
          path: '/webhook/:provider',
          operationId: 'paymentWebhook',
          summary: 'A payment provider reports a paid order',
          description:
            'Signed by the provider: `X-Timestamp` and `X-Signature` (HMAC-SHA256 over `<timestamp>.<raw body>`); no admin token. The order is credited exactly once however often it is reported (`already_paid` on a repeat).',
          tag,
          security: 'webhook',
          params: ProviderParams,
          rawBody: { mediaType: 'application/json', description: 'the event, read as bytes (at most 64 KiB) and parsed only once its signature checks out', schema: WebhookEvent },
          responses: { 200: json(WebhookResult) },
          errors: {
            400: '`amount_mismatch`: the amount differs from the order',
            401: '`unverified`: missing, stale or wrong signature, or a body that is not the event',
            404: '`unknown_provider` or `unknown_order`',
            409: '`not_payable`: the order is expired, failed or refunded',
          },
        },
        async ({ params }, req, reply) => {
          const raw = typeof req.body === 'string' ? req.body : '';
          const a = await deps.services.payments.webhook(params.provider, raw, req.headers);
          if (a.ok) return reply.code(200).send({ result: a.result, order_id: a.order_id });
          throw new AppError(a.kind, a.code, a.message);
        },
      );
    },
    { prefix: '/api/v1/payments' },
  );
}

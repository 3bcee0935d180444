import { z } from 'zod';

/**
 * The billing API's schemas (issue 52): what its routes validate with and what they answer, so the
 * OpenAPI document is generated from the very schemas in use. Money is integer minor units; dates
 * are ISO strings.
 */

const when = z.iso.datetime({ offset: true, message: 'expected an ISO 8601 date-time such as 2026-12-31T00:00:00Z' });
const money = z.number({ message: 'expected an integer amount in minor units (cents, fen)' }).int('expected an integer amount in minor units (cents, fen)');
const id = z.number().int().positive();

export const userBody = z.object({ external_id: z.string().min(1).max(128).optional(), email: z.email('expected an e-mail address').optional() }).strict();
export const planBody = z.object({ name: z.string().min(1).max(200), price: money.min(0), duration_days: z.number().int().min(1).max(3660) }).strict();
export const subBody = z
  .object({
    user_id: id,
    plan_id: id,
    starts_at: when.optional().meta({ description: 'default: now' }),
    expires_at: when.optional().meta({ description: "default: starts_at plus the plan's duration" }),
  })
  .strict();
export const orderBody = z
  .object({
    user_id: id,
    amount: money.min(1, 'expected a positive amount'),
    provider: z.string().min(1).meta({ description: 'a configured payments.providers name' }),
    provider_order_id: z.string().min(1).max(128).optional(),
    purpose: z.enum(['balance', 'subscription']),
    plan_id: id.optional().meta({ description: 'required for a subscription order' }),
    expires_at: when.optional().meta({ description: 'default: now plus billing.order_ttl' }),
  })
  .strict()
  .refine((o) => o.purpose === 'balance' || o.plan_id !== undefined, { message: 'a subscription order needs plan_id', path: ['plan_id'] });
export const notificationsQuery = z.object({ status: z.enum(['pending', 'sending', 'sent', 'failed', 'skipped']).optional(), limit: z.coerce.number().int().min(1).max(1000).default(100) }).strict();
export const settingsBody = z.object({ reminders_enabled: z.boolean().optional(), reminder_days: z.array(z.number().int().min(1).max(365)).min(1).max(10).optional() }).strict();

export const IdParams = z.object({ id: z.string().meta({ description: 'the id' }) });
export const ProviderParams = z.object({ provider: z.string().meta({ description: 'the payment provider (payments.providers)' }) });

const time = z.iso.datetime({ offset: true });

export const BillingUser = z
  .object({
    id: z.number().int(),
    external_id: z.string().nullable(),
    email: z.string().nullable(),
    balance: z.number().int(),
    frozen_balance: z.number().int(),
    created_at: time,
    updated_at: time,
  })
  .meta({ id: 'BillingUser' });
export const Plan = z.object({ id: z.number().int(), name: z.string(), price: z.number().int(), duration_days: z.number().int(), active: z.boolean(), created_at: time }).meta({ id: 'BillingPlan' });
export const PlanList = z.object({ plans: z.array(Plan) }).meta({ id: 'BillingPlanList' });
export const Subscription = z
  .object({
    id: z.number().int(),
    user_id: z.number().int(),
    plan_id: z.number().int(),
    starts_at: time,
    expires_at: time,
    status: z.enum(['active', 'expired', 'cancelled']),
    created_at: time,
    updated_at: time,
  })
  .meta({ id: 'BillingSubscription' });
export const UserWithSubscriptions = BillingUser.extend({ subscriptions: z.array(Subscription) }).meta({ id: 'BillingUserDetail' });

/** An order as lists show it. */
export const OrderSummary = z
  .object({
    id: z.number().int(),
    user_id: z.number().int(),
    amount: z.number().int(),
    currency: z.string(),
    provider: z.string(),
    provider_order_id: z.string(),
    purpose: z.enum(['balance', 'subscription']),
    plan_id: z.number().int().nullable(),
    status: z.enum(['pending', 'paid', 'expired', 'failed', 'refunded']),
    expires_at: time,
    paid_at: time.nullable(),
    created_at: time,
    updated_at: time,
  })
  .meta({ id: 'BillingOrderSummary' });
export const Order = OrderSummary.extend({
  last_checked_at: time.nullable().meta({ description: 'the last check of its status at the provider (payment_order_expiry)' }),
  check_failures: z.number().int(),
}).meta({ id: 'BillingOrder' });
export const OrderWithEvents = Order.extend({
  events: z.array(
    z.object({
      event: z.string(),
      from_status: z.string().nullable(),
      to_status: z.string().nullable(),
      source: z.string(),
      detail: z.record(z.string(), z.unknown()).nullable(),
      created_at: time,
    }),
  ),
}).meta({ id: 'BillingOrderDetail' });

export const Deliveries = z
  .object({
    deliveries: z.array(
      z.object({
        id: z.number().int(),
        dedup_key: z.string(),
        channel: z.string(),
        recipient: z.string(),
        template: z.string(),
        params: z.record(z.string(), z.unknown()),
        status: z.enum(['pending', 'sending', 'sent', 'failed', 'skipped']),
        attempts: z.number().int(),
        deferrals: z.number().int().meta({ description: "times the channel's rate limit put it back (not attempts)" }),
        rate_limited: z.boolean(),
        last_error: z.string().nullable(),
        created_at: time,
        sent_at: time.nullable(),
      }),
    ),
  })
  .meta({ id: 'NotificationDeliveries' });
export const Channels = z
  .object({
    channels: z.record(
      z.string(),
      z.object({
        up: z.boolean(),
        last_error: z.string().nullable(),
        last_failure_at: time.nullable(),
        last_success_at: time.nullable(),
        rate_limit: z.object({ count: z.number().int(), period: z.string() }).nullable().meta({ description: 'notify.rate_limit of the channel, cluster-wide' }),
        backlog: z.number().int(),
        rate_limited: z.number().int().meta({ description: 'how much of the backlog waits for the rate limit' }),
      }),
    ),
  })
  .meta({ id: 'NotificationChannels' });
export const ReminderSettings = z
  .object({ reminders_enabled: z.boolean(), reminder_days: z.array(z.number().int()).meta({ description: 'days before expiry, largest first' }) })
  .meta({ id: 'ReminderSettings' });

/** What the webhook reads once its signature checks out (documented; the route reads the raw bytes itself). */
export const WebhookEvent = z
  .object({ event_id: z.string(), provider_order_id: z.string(), status: z.literal('paid'), amount: z.number().int().positive().meta({ description: 'minor units; must match the order' }) })
  .meta({ id: 'PaymentWebhookEvent' });
export const WebhookResult = z.object({ result: z.enum(['paid', 'already_paid']), order_id: z.number().int() }).meta({ id: 'PaymentWebhookResult' });

import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { BillingServices } from './wiring.js';
import { BillingLists } from './store/billing-lists.js';
import { json, route } from '../../http/contract.js';
import { BillingUser, OrderSummary, Subscription } from './billing-contracts.js';

const cursor = z
  .string()
  .regex(/^[0-9]{1,16}$/, 'expected the next_cursor of the previous page')
  .transform(Number)
  .meta({ description: 'the `next_cursor` of the previous page' });
const userId = z
  .string()
  .regex(/^[1-9][0-9]{0,15}$/, 'expected a user id')
  .transform(Number);
const page = { limit: z.coerce.number().int().min(1).max(500).default(50), cursor: cursor.optional() };
const nextCursor = z.string().nullable().meta({ description: 'pass as `cursor` for the next page; null on the last' });

const LISTS = {
  users: {
    query: z.object({ ...page, email: z.string().min(1).optional(), external_id: z.string().min(1).optional() }).strict(),
    answer: z.object({ users: z.array(BillingUser), next_cursor: nextCursor }).meta({ id: 'BillingUserPage' }),
    operationId: 'listBillingUsers',
  },
  subscriptions: {
    query: z.object({ ...page, user_id: userId.optional(), status: z.enum(['active', 'expired', 'cancelled']).optional() }).strict(),
    answer: z.object({ subscriptions: z.array(Subscription), next_cursor: nextCursor }).meta({ id: 'BillingSubscriptionPage' }),
    operationId: 'listBillingSubscriptions',
  },
  orders: {
    query: z.object({ ...page, user_id: userId.optional(), status: z.enum(['pending', 'paid', 'expired', 'failed', 'refunded']).optional(), provider: z.string().min(1).optional() }).strict(),
    answer: z.object({ orders: z.array(OrderSummary), next_cursor: nextCursor }).meta({ id: 'BillingOrderPage' }),
    operationId: 'listBillingOrders',
  },
};

/**
 * `GET /billing/users`, `/billing/subscriptions`, `/billing/orders`: every collection the README
 * names can be listed, filtered, and paged with a cursor (`?limit=50&cursor=<next_cursor>`).
 */
export function registerBillingListRoutes(api: FastifyInstance, deps: Pick<RouteDeps<BillingServices>, 'db'>): void {
  const lists = new BillingLists(deps.db);
  for (const [c, spec] of Object.entries(LISTS) as Array<[keyof typeof LISTS, (typeof LISTS)[keyof typeof LISTS]]>) {
    route(
      api,
      {
        method: 'GET',
        path: `/billing/${c}`,
        operationId: spec.operationId,
        summary: `List billing ${c}, oldest first, a page at a time`,
        tag: 'billing',
        query: spec.query as z.ZodObject,
        prefixes: { query: 'query' },
        responses: { 200: json(spec.answer) },
      },
      async ({ query }) => {
        const { limit, cursor: after, ...filters } = query as { limit: number; cursor?: number } & Record<string, unknown>;
        const p = await lists.list(c, { limit, after, ...filters });
        return { [c]: p.items, next_cursor: p.next_cursor };
      },
    );
  }
}

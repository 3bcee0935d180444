import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { BillingServices } from './wiring.js';
import { BillingLists, type Collection } from './store/billing-lists.js';
import { parseBody } from '../../http/validation.js';

const cursor = z
  .string()
  .regex(/^[0-9]{1,16}$/, 'expected the next_cursor of the previous page')
  .transform(Number);
const userId = z
  .string()
  .regex(/^[1-9][0-9]{0,15}$/, 'expected a user id')
  .transform(Number);
const page = { limit: z.coerce.number().int().min(1).max(500).default(50), cursor: cursor.optional() };

const QUERIES: Record<Collection, z.ZodType<{ limit: number; cursor?: number } & Record<string, unknown>>> = {
  users: z.object({ ...page, email: z.string().min(1).optional(), external_id: z.string().min(1).optional() }).strict(),
  subscriptions: z.object({ ...page, user_id: userId.optional(), status: z.enum(['active', 'expired', 'cancelled']).optional() }).strict(),
  orders: z.object({ ...page, user_id: userId.optional(), status: z.enum(['pending', 'paid', 'expired', 'failed', 'refunded']).optional(), provider: z.string().min(1).optional() }).strict(),
};

/**
 * `GET /billing/users`, `/billing/subscriptions`, `/billing/orders`: every collection the README
 * names can be listed, filtered, and paged with a cursor (`?limit=50&cursor=<next_cursor>`).
 */
export function registerBillingListRoutes(api: FastifyInstance, deps: Pick<RouteDeps<BillingServices>, 'db'>): void {
  const lists = new BillingLists(deps.db);
  for (const c of Object.keys(QUERIES) as Collection[]) {
    api.get(`/billing/${c}`, async (req) => {
      const { limit, cursor: after, ...filters } = parseBody(QUERIES[c], req.query, 'query');
      const p = await lists.list(c, { limit, after, ...filters });
      return { [c]: p.items, next_cursor: p.next_cursor };
    });
  }
}

import type { Db } from '../../../store/db.js';
import { num } from '../../../store/db.js';

/** One page of a collection, oldest first; `next_cursor` is null on the last page. */
export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

export interface ListFilter {
  limit: number;
  /** The `next_cursor` of the previous page: rows after this id. */
  after?: number;
  user_id?: number;
  status?: string;
  provider?: string;
  email?: string;
  external_id?: string;
}

const row = (r: Record<string, unknown>) => {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) out[k] = v instanceof Date ? v.toISOString() : typeof v === 'string' && /^(id|user_id|plan_id|balance|frozen_balance|amount)$/.test(k) ? num(v) : v;
  return out;
};

/** Each collection, its columns shown, and the filters it accepts (each an equality on a column). */
const COLLECTIONS = {
  users: { table: 'billing_users', columns: 'id, external_id, email, balance, frozen_balance, created_at, updated_at', filters: ['email', 'external_id'] },
  subscriptions: { table: 'subscriptions', columns: 'id, user_id, plan_id, starts_at, expires_at, status, created_at, updated_at', filters: ['user_id', 'status'] },
  orders: {
    table: 'payment_orders',
    columns: 'id, user_id, amount, currency, provider, provider_order_id, purpose, plan_id, status, expires_at, paid_at, created_at, updated_at',
    filters: ['user_id', 'status', 'provider'],
  },
} as const;

export type Collection = keyof typeof COLLECTIONS;

/**
 * Keyset pagination over the billing collections (users, subscriptions, orders): `id > cursor
 * ORDER BY id`, so a page costs the same at any depth and rows inserted meanwhile never shift
 * a page. One named statement per collection, filters as bound parameters.
 */
export class BillingLists {
  constructor(private readonly db: Db) {}

  static filtersOf(c: Collection): readonly string[] {
    return COLLECTIONS[c].filters;
  }

  async list(c: Collection, f: ListFilter): Promise<Page<Record<string, unknown>>> {
    const spec = COLLECTIONS[c];
    const params: unknown[] = [f.after ?? 0];
    const where = ['id > $1'];
    for (const key of spec.filters) {
      const v = f[key as keyof ListFilter];
      if (v === undefined) continue;
      params.push(v);
      where.push(`${key} = $${params.length}`);
    }
    params.push(f.limit + 1);
    const { rows } = await this.db.query(`SELECT ${spec.columns} FROM ${spec.table} WHERE ${where.join(' AND ')} ORDER BY id LIMIT $${params.length}`, params);
    const items = rows.slice(0, f.limit).map(row);
    return { items, next_cursor: rows.length > f.limit ? String(items[items.length - 1]!.id) : null };
  }
}

import type { Db, Queryable } from '../../../store/db.js';
import { num } from '../../../store/db.js';
import { sqlNowParam } from '../../../store/sql-now.js';

const row = (r: Record<string, unknown>) => {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r))
    out[k] = v instanceof Date ? v.toISOString() : typeof v === 'string' && /^(id|user_id|plan_id|order_id|balance|frozen_balance|amount|price)$/.test(k) ? num(v) : v;
  return out;
};

/** An order whose provider checks keep failing waits base × 2^(failures − 1), at most 32 × base, between checks. */
const BACKOFF = `(check_failures = 0 OR last_checked_at <= clock_timestamp() - $3 * power(2, least(check_failures - 1, 5)) * interval '1 millisecond')`;

export interface Order {
  id: number;
  user_id: number;
  amount: number;
  currency: string;
  provider: string;
  provider_order_id: string;
  purpose: 'balance' | 'subscription';
  plan_id: number | null;
  status: 'pending' | 'paid' | 'expired' | 'failed' | 'refunded';
  expires_at: string;
  paid_at: string | null;
}

export type PaidResult = { changed: true; order: Order } | { changed: false; reason: 'already_paid' | 'amount_mismatch' | 'not_payable' | 'not_found'; order?: Order };

/**
 * Users, plans, subscriptions and payment orders. Money is bigint minor units. The two writes
 * that move money — an order becoming paid and its credit — happen in one transaction with
 * the order row locked, so an order is credited exactly once whoever reports the payment
 * (webhook, reconcile, expiry check) and however often.
 */
export class Billing {
  constructor(readonly db: Db) {}

  async createUser(u: { externalId?: string | null; email?: string | null }) {
    const { rows } = await this.db.query(`INSERT INTO billing_users (external_id, email) VALUES ($1, $2) RETURNING *`, [u.externalId ?? null, u.email ?? null]);
    return row(rows[0]!);
  }

  async user(id: number) {
    const { rows } = await this.db.query(`SELECT * FROM billing_users WHERE id = $1`, [id]);
    return rows[0] ? row(rows[0]) : null;
  }

  async createPlan(p: { name: string; price: number; durationDays: number }) {
    const { rows } = await this.db.query(`INSERT INTO plans (name, price, duration_days) VALUES ($1, $2, $3) RETURNING *`, [p.name, p.price, p.durationDays]);
    return row(rows[0]!);
  }

  async plans() {
    return (await this.db.query(`SELECT * FROM plans ORDER BY id`)).rows.map(row);
  }

  async plan(id: number) {
    const { rows } = await this.db.query(`SELECT * FROM plans WHERE id = $1`, [id]);
    return rows[0] ? row(rows[0]) : null;
  }

  async createSubscription(s: { userId: number; planId: number; startsAt: Date; expiresAt: Date }) {
    const { rows } = await this.db.query(`INSERT INTO subscriptions (user_id, plan_id, starts_at, expires_at) VALUES ($1, $2, $3, $4) RETURNING *`, [s.userId, s.planId, s.startsAt, s.expiresAt]);
    return row(rows[0]!);
  }

  async subscription(id: number) {
    const { rows } = await this.db.query(`SELECT * FROM subscriptions WHERE id = $1`, [id]);
    return rows[0] ? row(rows[0]) : null;
  }

  async subscriptionsOf(userId: number) {
    return (await this.db.query(`SELECT * FROM subscriptions WHERE user_id = $1 ORDER BY id`, [userId])).rows.map(row);
  }

  async cancelSubscription(id: number): Promise<boolean> {
    return (await this.db.query(`UPDATE subscriptions SET status = 'cancelled', updated_at = clock_timestamp() WHERE id = $1 AND status = 'active'`, [id])).rowCount === 1;
  }

  /** Active subscriptions past their end (at `now`, `sqlNow`: null is the database clock) become expired, in one statement. */
  async expireSubscriptions(now: Date | null = null): Promise<number> {
    return (await this.db.query(`UPDATE subscriptions SET status = 'expired', updated_at = clock_timestamp() WHERE status = 'active' AND expires_at <= ${sqlNowParam(1)}`, [now])).rowCount;
  }

  async createOrder(o: {
    userId: number;
    amount: number;
    currency: string;
    provider: string;
    providerOrderId: string | null;
    purpose: 'balance' | 'subscription';
    planId: number | null;
    expiresAt: Date;
  }): Promise<Order> {
    return this.db.tx(async (q) => {
      const { rows } = await q.query(
        `INSERT INTO payment_orders (user_id, amount, currency, provider, provider_order_id, purpose, plan_id, expires_at)
         VALUES ($1, $2, $3, $4, coalesce($5, 'ro_' || currval(pg_get_serial_sequence('payment_orders', 'id'))), $6, $7, $8) RETURNING *`,
        [o.userId, o.amount, o.currency, o.provider, o.providerOrderId, o.purpose, o.planId, o.expiresAt],
      );
      const order = row(rows[0]!) as unknown as Order;
      await this.event(q, order.id, o.provider, 'created', null, 'pending', 'admin', { amount: o.amount, purpose: o.purpose });
      return order;
    });
  }

  async order(id: number): Promise<Order | null> {
    const { rows } = await this.db.query(`SELECT * FROM payment_orders WHERE id = $1`, [id]);
    return rows[0] ? (row(rows[0]) as unknown as Order) : null;
  }

  async orderByProviderId(provider: string, providerOrderId: string): Promise<Order | null> {
    const { rows } = await this.db.query(`SELECT * FROM payment_orders WHERE provider = $1 AND provider_order_id = $2`, [provider, providerOrderId]);
    return rows[0] ? (row(rows[0]) as unknown as Order) : null;
  }

  async orderEvents(id: number) {
    return (await this.db.query(`SELECT event, from_status, to_status, source, detail, created_at FROM payment_order_events WHERE order_id = $1 ORDER BY id`, [id])).rows.map(row);
  }

  async event(
    q: Queryable,
    orderId: number | null,
    provider: string | null,
    event: string,
    from: string | null,
    to: string | null,
    source: string,
    detail: Record<string, unknown> | null,
  ): Promise<void> {
    await q.query(`INSERT INTO payment_order_events (order_id, provider, event, from_status, to_status, source, detail) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)`, [
      orderId,
      provider,
      event,
      from,
      to,
      source,
      detail ? JSON.stringify(detail) : null,
    ]);
  }

  /**
   * Marks an order paid and credits it, once. A pending order, or one expired locally whose
   * payment the provider confirms (paid before the close took effect), becomes paid; an order
   * already paid changes nothing; a different amount changes nothing. Every outcome is audited.
   */
  async markPaid(orderId: number, source: string, reportedAmount: number | null, detail: Record<string, unknown> = {}): Promise<PaidResult> {
    return this.db.tx(async (q) => {
      const { rows } = await q.query(`SELECT * FROM payment_orders WHERE id = $1 FOR UPDATE`, [orderId]);
      if (!rows[0]) return { changed: false, reason: 'not_found' };
      const order = row(rows[0]) as unknown as Order;
      if (order.status === 'paid') {
        await this.event(q, order.id, order.provider, 'paid_again_ignored', 'paid', 'paid', source, detail);
        return { changed: false, reason: 'already_paid', order };
      }
      if (reportedAmount !== null && reportedAmount !== order.amount) {
        await this.event(q, order.id, order.provider, 'amount_mismatch', order.status, order.status, source, { ...detail, reported: reportedAmount, expected: order.amount });
        return { changed: false, reason: 'amount_mismatch', order };
      }
      if (order.status !== 'pending' && order.status !== 'expired') {
        await this.event(q, order.id, order.provider, 'payment_refused', order.status, order.status, source, detail);
        return { changed: false, reason: 'not_payable', order };
      }
      const { rows: paid } = await q.query(`UPDATE payment_orders SET status = 'paid', paid_at = clock_timestamp(), updated_at = clock_timestamp() WHERE id = $1 RETURNING *`, [orderId]);
      if (order.purpose === 'balance') {
        await q.query(`UPDATE billing_users SET balance = balance + $2, updated_at = clock_timestamp() WHERE id = $1`, [order.user_id, order.amount]);
      } else {
        // Extend the user's active subscription to this plan, or start one now. A plan's day is 24 hours,
        // as the admin API counts it: `interval '1 day'` follows the session's time zone across a DST change.
        const ext = await q.query(
          `UPDATE subscriptions SET expires_at = expires_at + (SELECT duration_days FROM plans WHERE id = $2) * interval '24 hours', updated_at = clock_timestamp()
           WHERE id = (SELECT id FROM subscriptions WHERE user_id = $1 AND plan_id = $2 AND status = 'active' AND expires_at > clock_timestamp() ORDER BY expires_at DESC LIMIT 1)`,
          [order.user_id, order.plan_id],
        );
        if (ext.rowCount === 0) {
          await q.query(
            `INSERT INTO subscriptions (user_id, plan_id, starts_at, expires_at) SELECT $1, id, clock_timestamp(), clock_timestamp() + duration_days * interval '24 hours' FROM plans WHERE id = $2`,
            [order.user_id, order.plan_id],
          );
        }
      }
      await this.event(q, order.id, order.provider, order.status === 'expired' ? 'paid_after_expiry' : 'paid', order.status, 'paid', source, detail);
      return { changed: true, order: row(paid[0]!) as unknown as Order };
    });
  }

  /** pending → expired, only if still pending (a payment recorded at the same moment wins). */
  async expireOrder(orderId: number, detail: Record<string, unknown>): Promise<boolean> {
    return this.db.tx(async (q) => {
      const { rows } = await q.query(`UPDATE payment_orders SET status = 'expired', updated_at = clock_timestamp() WHERE id = $1 AND status = 'pending' RETURNING provider`, [orderId]);
      if (!rows[0]) return false;
      await this.event(q, orderId, String(rows[0].provider), 'expired', 'pending', 'expired', 'expiry', detail);
      return true;
    });
  }

  async checkFailed(orderId: number): Promise<void> {
    await this.db.query(`UPDATE payment_orders SET check_failures = check_failures + 1, last_checked_at = clock_timestamp() WHERE id = $1`, [orderId]);
  }

  async checked(orderId: number): Promise<void> {
    await this.db.query(`UPDATE payment_orders SET check_failures = 0, last_checked_at = clock_timestamp() WHERE id = $1`, [orderId]);
  }

  /** Pending orders to ask the provider about: recent ones and those about to expire, least recently checked first. */
  async reconcileCandidates(windowMs: number, limit: number, retryBaseMs: number): Promise<number[]> {
    const { rows } = await this.db.query(
      `SELECT id FROM payment_orders WHERE status = 'pending' AND expires_at > clock_timestamp()
         AND (created_at > clock_timestamp() - $1 * interval '1 millisecond' OR expires_at <= clock_timestamp() + interval '5 minutes')
         AND ${BACKOFF}
       ORDER BY last_checked_at NULLS FIRST, id LIMIT $2`,
      [windowMs, limit, retryBaseMs],
    );
    return rows.map((r) => num(r.id));
  }

  /** Pending orders past their expiry at `now` (`sqlNow`: null is the database clock). */
  async expiryCandidates(limit: number, retryBaseMs: number, now: Date | null = null): Promise<number[]> {
    const { rows } = await this.db.query(
      `SELECT id FROM payment_orders WHERE status = 'pending' AND expires_at <= ${sqlNowParam(3)} AND ${BACKOFF.replace(/\$3/g, () => '$2')} ORDER BY expires_at, id LIMIT $1`,
      [limit, retryBaseMs, now],
    );
    return rows.map((r) => num(r.id));
  }
}

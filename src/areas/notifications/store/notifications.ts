import type { Db } from '../../../store/db.js';
import { randomUUID } from 'node:crypto';
import { iso, num } from '../../../store/db.js';
import { claimDue, heldBy, leaseFree, releaseLease, renewLease, type LeaseTable } from '../../../store/claim-queue.js';

export interface Delivery {
  id: number;
  dedup_key: string;
  channel: string;
  recipient: string;
  template: string;
  params: Record<string, unknown>;
  status: 'pending' | 'sending' | 'sent' | 'failed' | 'skipped';
  attempts: number;
  /** Times the channel's cluster-wide rate limit put it back (not attempts). */
  deferrals: number;
  /** Pending because the channel's rate limit was full; retried when a slot frees. */
  rate_limited: boolean;
  last_error: string | null;
  created_at: string;
  sent_at: string | null;
}

/** A delivery as claimed: `claim` is the claim's token (`claimed_by`), new on every claim, so it fences the holder's later writes. */
export interface ClaimedDelivery extends Delivery {
  claim: string;
}

function toDelivery(r: Record<string, unknown>): Delivery {
  return {
    id: num(r.id),
    dedup_key: String(r.dedup_key),
    channel: String(r.channel),
    recipient: String(r.recipient),
    template: String(r.template),
    params: r.params as Record<string, unknown>,
    status: r.status as Delivery['status'],
    attempts: num(r.attempts),
    deferrals: num(r.deferrals),
    rate_limited: r.rate_limited === true,
    last_error: (r.last_error as string) ?? null,
    created_at: iso(r.created_at)!,
    sent_at: iso(r.sent_at),
  };
}

/**
 * The notification outbox and delivery log. An intent is a row (unique `dedup_key`) written
 * before anything is sent; a sender claims due rows (`claim-queue.ts`) with a lease, and records
 * the result after. A sender that dies mid-send leaves a `sending` row: taken over at once when
 * its liveness key is gone (its process died), else when its lease lapses; the row is sent again
 * with the same message id and idempotency key (at least once: a crash between the remote
 * server's acceptance and the `sent` record cannot be undone).
 *
 * `claimed_by` holds a token new on every claim (`<owner>/<uuid>`), which fences the holder: it
 * re-takes a row under its token just before sending it (`hold`), and its `sent`, `failed`,
 * `skipped`, `release` and `defer` match the row only while it still holds that token. A sender
 * whose lease lapsed while it was still working (a slow chunk, a lost liveness session) and whose
 * row was taken over since therefore neither sends it again nor writes over the new holder.
 */
// One statement per (window, channel): the reminder intent for every active subscription whose
// end falls inside the window. The key names the subscription, the window and the period end, so
// each is recorded once, and a renewed subscription (new period end) is a new key.
const QUEUE_REMINDERS = (channel: 'email' | 'webhook') => `
INSERT INTO notification_deliveries (dedup_key, channel, recipient, template, params)
SELECT 'reminder:' || s.id || ':' || $1::int || 'd:' || to_char(s.expires_at AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS.US') || ':${channel}', '${channel}',
       ${channel === 'email' ? 'u.email' : 'u.id::text'}, 'subscription_reminder',
       jsonb_build_object('subscription_id', s.id, 'period_end', s.expires_at, 'days', $1::int, 'plan', p.name,
                          'expires_at', to_char(s.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'))
FROM subscriptions s JOIN billing_users u ON u.id = s.user_id JOIN plans p ON p.id = s.plan_id
WHERE s.status = 'active' AND s.expires_at > clock_timestamp() + $2::int * interval '1 day' AND s.expires_at <= clock_timestamp() + $1::int * interval '1 day'
  ${channel === 'email' ? 'AND u.email IS NOT NULL' : ''}
ON CONFLICT (dedup_key) DO NOTHING`;
/** A delivery's send lease (`claim-queue.ts`); `claimed_alive_key` is the sender's liveness key (migration 027). */
const OUTBOX: LeaseTable = { table: 'notification_deliveries', key: 'id', owner: 'claimed_by', until: 'claimed_until', aliveKey: 'claimed_alive_key' };
// Pending and due, or `sending` with a free lease (expired, or its sender died: sent again at once,
// with the same message id). A pending row carries no lease. $1 owner, $2 limit, $3 lease ms,
// $4 templates (null: all), $5 channels to skip, $6 the sender's liveness key.
const CLAIM = claimDue(OUTBOX, {
  due: `($4::text[] IS NULL OR template = ANY($4::text[])) AND channel <> ALL($5::text[])`,
  free: `((status = 'pending' AND next_attempt_at <= clock_timestamp()) OR (status = 'sending' AND ${leaseFree(OUTBOX)}))`,
  order: 'next_attempt_at, id',
  limit: '$2',
  owner: '$1',
  leaseMs: '$3',
  aliveKey: '$6',
  set: [`status = 'sending'`],
  returning: 't.*',
});
/** The row is still `sending` under this claim's token ($2). */
const HELD = `status = 'sending' AND ${heldBy(OUTBOX, { owner: '$2' })}`;
/** Re-taken before its send: the lease now + $3 ms, under this replica's current liveness key ($4). */
const HOLD = renewLease(OUTBOX, { key: '$1', owner: '$2', leaseMs: '$3', aliveKey: '$4::int', and: `status = 'sending'` });
/** Frees the lease with the row's other changes (`set`), only while still `sending` under the claim's token ($2). */
const putBack = (set: string[], returning?: string) => releaseLease(OUTBOX, { key: '$1', owner: '$2', set, and: `status = 'sending'`, returning });
const FAILED = putBack(
  [
    `status = CASE WHEN attempts + 1 >= $5 THEN 'failed' ELSE 'pending' END`,
    'attempts = attempts + 1',
    'last_error = $3',
    `next_attempt_at = clock_timestamp() + $4 * interval '1 millisecond'`,
    'rate_limited = false',
  ],
  'status',
);
const RELEASE = putBack([`status = 'pending'`, `next_attempt_at = clock_timestamp() + $3 * interval '1 millisecond'`, 'rate_limited = false']);
const DEFER = putBack([`status = 'pending'`, 'next_attempt_at = $3', 'deferrals = deferrals + 1', 'rate_limited = true']);
const REMINDER_STILL_DUE = `SELECT 1 FROM subscriptions WHERE id = $1 AND status = 'active' AND expires_at = $2::timestamptz AND expires_at > clock_timestamp()`;

export class Notifications {
  /** `aliveKey`: this replica's liveness key, recorded with each claim (null or absent: a send lease can only expire). */
  constructor(
    private readonly db: Db,
    private readonly aliveKey: () => number | null = () => null,
  ) {}

  /** Records the reminder intents of one window (`days` before the end, down to `nextDays`) for a channel; returns how many were new. */
  async queueReminders(channel: 'email' | 'webhook', days: number, nextDays: number): Promise<number> {
    return (await this.db.query(QUEUE_REMINDERS(channel), [days, nextDays])).rowCount;
  }

  /** A reminder whose subscription was renewed, cancelled or has expired is not sent: the reason, or null when still due. */
  async reminderStillDue(d: Delivery): Promise<string | null> {
    if (d.template !== 'subscription_reminder') return null;
    const { rowCount } = await this.db.query(REMINDER_STILL_DUE, [d.params.subscription_id, d.params.period_end]);
    return rowCount === 1 ? null : 'subscription renewed, cancelled or ended since the reminder was queued';
  }

  /** Due deliveries, optionally only of some templates (each area sends its own on its own cadence), never of `skipChannels` (down or rate-limited this round). */
  async claim(owner: string, limit: number, leaseMs: number, templates: string[] | null = null, skipChannels: string[] = []): Promise<ClaimedDelivery[]> {
    const token = `${owner}/${randomUUID()}`;
    const { rows } = await this.db.query(CLAIM, [token, limit, leaseMs, templates, skipChannels, this.aliveKey()]);
    return rows.map((r) => ({ ...toDelivery(r), claim: token })).sort((a, b) => a.id - b.id);
  }

  /**
   * Re-takes a claimed row just before it is sent: still held under `claim`, its lease now covers
   * the send (`leaseMs` from now) and names this replica's current liveness key.
   * False when the lease lapsed and another sender took the row over: it must not be sent.
   */
  async hold(id: number, claim: string, leaseMs: number): Promise<boolean> {
    return (await this.db.query(HOLD, [id, claim, leaseMs, this.aliveKey()])).rowCount === 1;
  }

  /** Records the send; false when the row was taken over meanwhile (its new holder records it). */
  async sent(id: number, claim: string): Promise<boolean> {
    const { rowCount } = await this.db.query(
      `UPDATE notification_deliveries SET status = 'sent', sent_at = clock_timestamp(), attempts = attempts + 1, last_error = NULL, rate_limited = false WHERE id = $1 AND ${HELD}`,
      [id, claim],
    );
    return rowCount === 1;
  }

  async skipped(id: number, claim: string, reason: string): Promise<void> {
    await this.db.query(`UPDATE notification_deliveries SET status = 'skipped', last_error = $3 WHERE id = $1 AND ${HELD}`, [id, claim, reason]);
  }

  /**
   * A failed attempt: retried after `retryMs`, or failed for good after `maxAttempts`; `lost` when
   * the row was taken over meanwhile (a stale failure must not put a row another sender holds, or
   * has sent, back to pending).
   */
  async failed(id: number, claim: string, error: string, retryMs: number, maxAttempts: number): Promise<'retry' | 'failed' | 'lost'> {
    const { rows } = await this.db.query<{ status: string }>(FAILED, [id, claim, error.slice(0, 500), retryMs, maxAttempts]);
    if (!rows[0]) return 'lost';
    return rows[0].status === 'failed' ? 'failed' : 'retry';
  }

  /** Puts a claimed row back untouched (its channel is down this round), if still held under `claim`. */
  async release(id: number, claim: string, delayMs: number): Promise<void> {
    await this.db.query(RELEASE, [id, claim, delayMs]);
  }

  /**
   * Puts a claimed row back because its channel's cluster-wide rate limit is full: pending again,
   * due when the first slot frees, counted as a deferral and never as an attempt.
   */
  async defer(id: number, claim: string, until: Date): Promise<void> {
    await this.db.query(DEFER, [id, claim, until]);
  }

  /** The outbox backlog per channel: pending or sending, and how many of those wait for the rate limit. */
  async backlog(): Promise<Record<string, { backlog: number; rate_limited: number }>> {
    const { rows } = await this.db.query<{ channel: string; backlog: unknown; rate_limited: unknown }>(
      `SELECT channel, count(*) AS backlog, count(*) FILTER (WHERE status = 'pending' AND rate_limited) AS rate_limited
         FROM notification_deliveries WHERE status IN ('pending', 'sending') GROUP BY channel`,
    );
    return Object.fromEntries(rows.map((r) => [r.channel, { backlog: num(r.backlog), rate_limited: num(r.rate_limited) }]));
  }

  async settings(): Promise<Record<string, unknown>> {
    const { rows } = await this.db.query<{ key: string; value: unknown }>(`SELECT key, value FROM notification_settings`);
    return Object.fromEntries(rows.map((r) => [r.key, r.value]));
  }

  async putSettings(values: Record<string, unknown>): Promise<void> {
    await this.db.tx(async (q) => {
      for (const [k, v] of Object.entries(values)) {
        await q.query(`INSERT INTO notification_settings (key, value) VALUES ($1, $2::jsonb) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = clock_timestamp()`, [
          k,
          JSON.stringify(v),
        ]);
      }
    });
  }

  async list(f: { status?: string; limit: number }): Promise<Delivery[]> {
    const { rows } = await this.db.query(`SELECT * FROM notification_deliveries WHERE ($1::text IS NULL OR status = $1) ORDER BY id DESC LIMIT $2`, [f.status ?? null, f.limit]);
    return rows.map(toDelivery);
  }
}

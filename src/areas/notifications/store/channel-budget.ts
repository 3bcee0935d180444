import { randomUUID } from 'node:crypto';
import type { Db } from '../../../store/db.js';
import { toDate } from '../../../store/db.js';
import { claimCtes, renewLease, type LeaseTable } from '../../../store/claim-queue.js';

const ENSURE_SLOTS = `INSERT INTO notification_channel_slots (channel, slot) SELECT $1, g FROM generate_series(0, $2::int - 1) AS g ON CONFLICT DO NOTHING`;
/** A send slot's hold is a lease (`claim-queue.ts`): `busy_until` its deadline, `token` the sender's claim. */
const SLOTS: LeaseTable = { table: 'notification_channel_slots', key: ['channel', 'slot'], owner: 'token', until: 'busy_until' };
// One statement: takes the first free slot of the channel (skipping slots another sender is
// taking right now), or says when the first one frees. $1 channel, $2 count, $3 hold ms, $4 token.
const TAKE = `
WITH ${claimCtes(SLOTS, { due: 'channel = $1 AND slot < $2', order: 'busy_until, slot', limit: '1', owner: '$4', leaseMs: '$3', returning: 't.slot' }, 'took').join(',\n')}
SELECT (SELECT slot FROM took) AS slot,
       greatest(clock_timestamp(), (SELECT min(busy_until) FROM notification_channel_slots WHERE channel = $1 AND slot < $2)) AS free_at`;
// The send finished (delivered or not): the slot stays held for one period from now.
const SETTLE = renewLease(SLOTS, { owner: '$2', leaseMs: '$3', and: 'channel = $1' });

export type BudgetTake = { token: string } | { retryAt: Date };

/**
 * The cluster-wide send budget of each notification channel, in PostgreSQL (so it holds across
 * replicas, in embedded mode, and while Redis is down). A channel limited to `count` sends per
 * `period` has `count` slots. A sender takes a slot just before sending, with a hold that
 * outlasts the send (`holdMs`), and settles it when the send is over: the slot then frees one
 * `period` after the send finished. So between the start of any send and the end of the
 * `count`-th send before it there is at least one `period`: no `period`-long interval ever
 * sees more than `count` sends arrive, even when sends overlap or a sender dies mid-send.
 */
export class ChannelBudget {
  private readonly ensured = new Map<string, number>();

  constructor(private readonly db: Db) {}

  async take(channel: string, count: number, holdMs: number): Promise<BudgetTake> {
    if ((this.ensured.get(channel) ?? 0) < count) {
      await this.db.query(ENSURE_SLOTS, [channel, count]);
      this.ensured.set(channel, count);
    }
    const token = randomUUID();
    const r = (await this.db.query<{ slot: number | null; free_at: unknown }>(TAKE, [channel, count, Math.ceil(holdMs), token])).rows[0]!;
    return r.slot === null ? { retryAt: toDate(r.free_at)! } : { token };
  }

  async settle(channel: string, token: string, periodMs: number): Promise<void> {
    await this.db.query(SETTLE, [channel, token, Math.ceil(periodMs)]);
  }
}

import type { Queryable } from '../../../store/db.js';

/** One notice to send: an outbox row once enqueued; `dedupKey` names the intent (the same key is recorded once). */
export interface DeliveryIntent {
  dedupKey: string;
  channel: string;
  recipient: string;
  template: string;
  params: Record<string, unknown>;
}

/**
 * Notifications' enqueue for other areas (ops' alert events and reports): the intents become
 * `notification_deliveries` rows on the caller's transaction, so they commit with the transition
 * they announce. A key already present is the same intent recorded before (nothing is sent twice).
 * Returns how many were new. The outbox is this area's table: no other area writes it
 * (test/table-owners.test.ts).
 */
export async function enqueueDeliveries(q: Queryable, intents: readonly DeliveryIntent[]): Promise<number> {
  let n = 0;
  for (const i of intents) {
    n += (
      await q.query(`INSERT INTO notification_deliveries (dedup_key, channel, recipient, template, params) VALUES ($1, $2, $3, $4, $5::jsonb) ON CONFLICT (dedup_key) DO NOTHING`, [
        i.dedupKey,
        i.channel,
        i.recipient,
        i.template,
        JSON.stringify(i.params),
      ])
    ).rowCount;
  }
  return n;
}

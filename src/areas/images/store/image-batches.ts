import type { Db, Queryable } from '../../../store/db.js';
import { iso, num } from '../../../store/db.js';
import { holdBalance, lockBillingUser } from '../../billing/index.js';

export const BATCH_STATES = ['created', 'uploading', 'submitted', 'running', 'indexing', 'settling', 'completed', 'failed', 'cancelled', 'output_deleted'] as const;
export type BatchState = (typeof BATCH_STATES)[number];
export const TERMINAL: readonly BatchState[] = ['completed', 'failed', 'cancelled', 'output_deleted'];

export interface ImageBatch {
  id: number;
  user_id: number;
  model: string;
  size: string;
  n: number;
  prompts: string[];
  image_count: number;
  price_per_image: number;
  hold_amount: number;
  state: BatchState;
  reason: string | null;
  cancel_requested: boolean;
  input_file_id: string | null;
  create_sent_at: string | null;
  provider_batch_id: string | null;
  provider_status: string | null;
  output_file_id: string | null;
  error_file_id: string | null;
  succeeded: number;
  failed: number;
  captured: number;
  errors: number;
  ended_at: string | null;
  inputs_deleted_at: string | null;
  created_at: string;
  updated_at: string;
}

export interface NewBatch {
  userId: number;
  idempotencyKey: string;
  requestHash: string;
  model: string;
  size: string;
  n: number;
  prompts: string[];
  pricePerImage: number;
}

export type SubmitResult =
  { kind: 'created'; batch: ImageBatch } | { kind: 'replay'; batch: ImageBatch } | { kind: 'conflict' } | { kind: 'insufficient'; balance: number; shortfall: number } | { kind: 'no_user' };

const NUMERIC = new Set(['id', 'user_id', 'n', 'image_count', 'price_per_image', 'hold_amount', 'succeeded', 'failed', 'captured', 'errors']);

export function toBatch(r: Record<string, unknown>): ImageBatch {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) {
    if (k === 'idempotency_key' || k === 'request_hash') continue;
    out[k] = v instanceof Date ? iso(v) : NUMERIC.has(k) ? num(v) : v;
  }
  return out as unknown as ImageBatch;
}

/** A state change recorded in the same transaction as the change. */
export async function recordEvent(q: Queryable, batchId: number, from: BatchState | null, to: BatchState, reason: string | null): Promise<void> {
  await q.query(`INSERT INTO image_batch_events (batch_id, from_state, to_state, reason) VALUES ($1, $2, $3, $4)`, [batchId, from, to, reason]);
}

/**
 * Image batch records and the three money steps. Every money step is one transaction that
 * claims its dedup row in `image_batch_money` first: a replayed step (after a crash, or by a
 * second replica) hits the unique index and changes nothing. A batch is settled once: capture
 * and release share one unique index, so a release after a capture (or the reverse) is refused too.
 */
export class ImageBatches {
  constructor(readonly db: Db) {}

  /**
   * The record, the hold (balance → frozen) and the queue row, in one transaction. The same
   * (user, key) again returns the first batch when the body matches, a conflict otherwise.
   */
  async submit(b: NewBatch): Promise<SubmitResult> {
    const holdAmount = b.prompts.length * b.n * b.pricePerImage;
    if (!Number.isSafeInteger(holdAmount)) throw new RangeError('hold amount exceeds the safe integer range');
    return this.db
      .tx<SubmitResult>(async (q) => {
        // The user row locked first: submits of one user are serialised, and an unknown user is an answer, not a foreign-key error.
        if (!(await lockBillingUser(q, b.userId))) return { kind: 'no_user' };
        const { rows } = await q.query(
          `INSERT INTO image_batches (user_id, idempotency_key, request_hash, model, size, n, prompts, image_count, price_per_image, hold_amount)
         VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10) ON CONFLICT (user_id, idempotency_key) DO NOTHING RETURNING *`,
          [b.userId, b.idempotencyKey, b.requestHash, b.model, b.size, b.n, JSON.stringify(b.prompts), b.prompts.length * b.n, b.pricePerImage, holdAmount],
        );
        if (!rows[0]) {
          const prior = (await q.query(`SELECT * FROM image_batches WHERE user_id = $1 AND idempotency_key = $2`, [b.userId, b.idempotencyKey])).rows[0]!;
          return prior.request_hash === b.requestHash ? { kind: 'replay', batch: toBatch(prior) } : { kind: 'conflict' };
        }
        const batch = toBatch(rows[0]);
        // Billing's hold, in this transaction: the batch, its hold and its queue row commit together.
        const held = await holdBalance(q, b.userId, holdAmount);
        if (held.kind !== 'held') throw new SubmitRefused(held);
        await q.query(`INSERT INTO image_batch_money (batch_id, step, amount) VALUES ($1, 'hold', $2)`, [batch.id, holdAmount]);
        await q.query(`INSERT INTO image_batch_queue (batch_id) VALUES ($1)`, [batch.id]);
        await recordEvent(q, batch.id, null, 'created', null);
        return { kind: 'created', batch };
      })
      .catch((err: unknown) => {
        if (err instanceof SubmitRefused) return err.result;
        throw err;
      });
  }

  async get(id: number): Promise<ImageBatch | null> {
    const { rows } = await this.db.query(`SELECT * FROM image_batches WHERE id = $1`, [id]);
    return rows[0] ? toBatch(rows[0]) : null;
  }

  async list(filter: { userId?: number; state?: BatchState; limit: number; beforeId?: number }): Promise<ImageBatch[]> {
    const { rows } = await this.db.query(
      `SELECT * FROM image_batches WHERE ($1::bigint IS NULL OR user_id = $1) AND ($2::text IS NULL OR state = $2) AND ($3::bigint IS NULL OR id < $3) ORDER BY id DESC LIMIT $4`,
      [filter.userId ?? null, filter.state ?? null, filter.beforeId ?? null, filter.limit],
    );
    return rows.map(toBatch);
  }

  async events(id: number) {
    const { rows } = await this.db.query(`SELECT from_state, to_state, reason, at FROM image_batch_events WHERE batch_id = $1 ORDER BY id`, [id]);
    return rows.map((r) => ({ from: r.from_state as string | null, to: r.to_state as string, reason: r.reason as string | null, at: iso(r.at) }));
  }

  async results(id: number) {
    const { rows } = await this.db.query(`SELECT idx, status, images, object_keys, error FROM image_batch_results WHERE batch_id = $1 ORDER BY idx`, [id]);
    return rows.map((r) => ({ idx: num(r.idx), status: r.status as string, images: num(r.images), object_keys: r.object_keys as string[], error: r.error as string | null }));
  }

  async money(id: number) {
    const { rows } = await this.db.query(`SELECT step, amount, refunded, at FROM image_batch_money WHERE batch_id = $1 ORDER BY at`, [id]);
    return rows.map((r) => ({ step: r.step as string, amount: num(r.amount), refunded: num(r.refunded), at: iso(r.at) }));
  }

  /**
   * What the batches among `ids` still reference in the object store (the orphan sweep): per
   * existing batch its state, whether its input is deleted, and its results' object keys. A
   * batch id missing from the answer no longer exists.
   */
  async objectRefs(ids: number[]): Promise<Map<number, { state: BatchState; inputDeleted: boolean; keys: Set<string> }>> {
    const { rows } = await this.db.query(
      `SELECT b.id, b.state, b.inputs_deleted_at IS NOT NULL AS input_deleted,
              coalesce((SELECT jsonb_agg(k) FROM image_batch_results r, jsonb_array_elements_text(r.object_keys) k WHERE r.batch_id = b.id), '[]'::jsonb) AS keys
         FROM image_batches b WHERE b.id = ANY($1::bigint[])`,
      [ids],
    );
    return new Map(rows.map((r) => [num(r.id), { state: r.state as BatchState, inputDeleted: Boolean(r.input_deleted), keys: new Set(r.keys as string[]) }]));
  }

  /** Holds not yet captured or released: how many and their total (the ops check's gauge). */
  async openHolds(): Promise<{ count: number; amount: number }> {
    const { rows } = await this.db.query(
      `SELECT count(*) AS count, coalesce(sum(h.amount), 0) AS amount FROM image_batch_money h
       WHERE h.step = 'hold' AND NOT EXISTS (SELECT 1 FROM image_batch_money s WHERE s.batch_id = h.batch_id AND s.step IN ('capture', 'release'))`,
    );
    return { count: num(rows[0]!.count), amount: num(rows[0]!.amount) };
  }
}

class SubmitRefused extends Error {
  constructor(readonly result: SubmitResult) {
    super(result.kind);
  }
}

import type { Db } from '../../../store/db.js';
import { FENCED_WRITE_CTE, FencedWriteRefused } from '../../../coordination/fenced-cursor.js';

const MARK = 'INSERT INTO canary_runs (slot, instance_id, fencing_token, phase) VALUES ($1::timestamptz, $2, $3, $4)';
// The fenced cursor write and the end row in one statement: the end row exists only if the write was accepted. $5 slot, $6 instance
const END = `WITH ${FENCED_WRITE_CTE}
INSERT INTO canary_runs (slot, instance_id, fencing_token, phase) SELECT $5::timestamptz, $6, $4::bigint, 'end' FROM fenced`;

/** The canary job's start/end rows: an overlap or a duplicate slot shows up as interleaved or repeated rows. */
export class CanaryRuns {
  constructor(private readonly db: Db) {}

  async mark(slot: Date, instanceId: string, fencingToken: number, phase: 'start' | 'end'): Promise<void> {
    await this.db.query(MARK, [slot.toISOString(), instanceId, fencingToken, phase]);
  }

  /** Advances the canary's fenced cursor `key` and writes the end row, in one statement; refused (nothing written) for a stale token. */
  async endFenced(job: string, key: string, value: unknown, slot: Date, instanceId: string, fencingToken: number): Promise<void> {
    const { rowCount } = await this.db.query(END, [job, key, JSON.stringify(value), fencingToken, slot.toISOString(), instanceId]);
    if (rowCount !== 1) throw new FencedWriteRefused(job, key, fencingToken);
  }
}

import type { Db } from '../../../store/db.js';

const MARK = 'INSERT INTO canary_runs (slot, instance_id, fencing_token, phase) VALUES ($1::timestamptz, $2, $3, $4)';

/** The canary job's start/end rows: an overlap or a duplicate slot shows up as interleaved or repeated rows. */
export class CanaryRuns {
  constructor(private readonly db: Db) {}

  async mark(slot: Date, instanceId: string, fencingToken: number, phase: 'start' | 'end'): Promise<void> {
    await this.db.query(MARK, [slot.toISOString(), instanceId, fencingToken, phase]);
  }
}

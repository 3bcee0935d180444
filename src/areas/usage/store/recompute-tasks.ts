import type { Db } from '../../../store/db.js';
import { iso, num } from '../../../store/db.js';
import { RangeTaskTable, type RangeTaskStatus } from './range-tasks.js';

export interface RecomputeTask {
  id: number;
  from: string;
  to: string;
  /** Where the next chunk starts: progress that survives a restart. */
  next_start: string;
  status: RangeTaskStatus;
  claimed_by: string | null;
  heartbeat_at: string | null;
  chunks: number;
  chunks_done: number;
  rows: number;
  error: string | null;
  created_at: string;
  finished_at: string | null;
}

function toTask(r: Record<string, unknown>): RecomputeTask {
  return {
    id: num(r.id),
    from: iso(r.range_start)!,
    to: iso(r.range_end)!,
    next_start: iso(r.next_start)!,
    status: r.status as RangeTaskStatus,
    claimed_by: (r.claimed_by as string) ?? null,
    heartbeat_at: iso(r.heartbeat_at),
    chunks: num(r.chunks),
    chunks_done: num(r.chunks_done),
    rows: num(r.rows_rebuilt),
    error: (r.error as string) ?? null,
    created_at: iso(r.created_at)!,
    finished_at: iso(r.finished_at),
  };
}

/** Rollup recomputes of a range (the watermark does not move), run by dashboard_aggregation rounds. */
export class RecomputeTasks extends RangeTaskTable<RecomputeTask> {
  constructor(db: Db) {
    super(db, 'usage_recompute_tasks', toTask);
  }

  async create(from: Date, to: Date, chunks: number): Promise<RecomputeTask> {
    const { rows } = await this.db.query(`INSERT INTO usage_recompute_tasks (range_start, range_end, next_start, chunks) VALUES ($1, $2, $1, $3) RETURNING *`, [from, to, chunks]);
    return toTask(rows[0]!);
  }

  /** Records a finished chunk; false when the task was cancelled or taken over meanwhile (stop). */
  async progress(id: number, owner: string, nextStart: Date, rows: number): Promise<boolean> {
    const { rowCount } = await this.db.query(
      `UPDATE usage_recompute_tasks SET heartbeat_at = clock_timestamp(), next_start = $3, chunks_done = chunks_done + 1, rows_rebuilt = rows_rebuilt + $4
       WHERE ${this.held}`,
      [id, owner, nextStart, rows],
    );
    return rowCount === 1;
  }

  async finish(id: number, owner: string): Promise<void> {
    await this.db.query(`UPDATE usage_recompute_tasks SET status = 'done', finished_at = clock_timestamp() WHERE ${this.held}`, [id, owner]);
  }
}

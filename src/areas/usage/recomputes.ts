import { InvalidInput } from '../../errors/app-error.js';
import type { RecomputeTask, RecomputeTasks } from './store/recompute-tasks.js';
import type { Rollups } from './store/rollups.js';
import type { JobContext } from '../../scheduler/job.js';
import { CHUNK, floorHour, rebuildRange } from './rollup-rebuild.js';

/** The widest range one recompute may cover: a year of daily chunks (about 366 transactions). */
export const MAX_RECOMPUTE_DAYS = 366;
const DAY = 86_400_000;

class Stopped extends Error {}

/**
 * Rollup recomputes of a range (the watermark does not move) as database tasks: requested through
 * the API, claimed and run by dashboard_aggregation rounds a day-chunk at a time, with progress
 * stored after each chunk. A cancelled task stops at its next chunk; a round that is aborted
 * (shutdown, timeout) hands its task back so any replica resumes it where it stopped.
 */
export class Recomputes {
  constructor(
    readonly tasks: RecomputeTasks,
    private readonly rollups: Rollups,
    private readonly taskTimeoutMs: number,
  ) {}

  /** Records a recompute; refused when the range is empty or wider than MAX_RECOMPUTE_DAYS. */
  async request(from: Date, to: Date): Promise<RecomputeTask> {
    const start = floorHour(from.getTime());
    if (to.getTime() <= from.getTime()) throw new InvalidInput([{ field: 'to', message: 'must be after from' }]);
    if (to.getTime() - start > MAX_RECOMPUTE_DAYS * DAY) {
      throw new InvalidInput([{ field: 'to', message: `the range may span at most ${MAX_RECOMPUTE_DAYS} days; split it into several recomputes` }]);
    }
    return this.tasks.create(new Date(start), to, Math.max(1, Math.ceil((to.getTime() - start) / CHUNK)));
  }

  /** Runs one claimable task, if any, within the round. Returns the rollup rows it rebuilt. */
  async runOne(ctx: JobContext): Promise<number> {
    const task = await this.tasks.claim(ctx.instanceId, this.taskTimeoutMs);
    if (!task) return 0;
    const log = ctx.log.child({ recompute_id: task.id });
    let rows = 0;
    let loggedPct = -1;
    try {
      await rebuildRange(
        this.rollups,
        new Date(task.next_start),
        new Date(task.to),
        async (p) => {
          rows += p.rows;
          if (!(await this.tasks.progress(task.id, ctx.instanceId, p.to, p.rows))) throw new Stopped();
          const done = task.chunks_done + p.chunk;
          const pct = Math.floor((done / task.chunks) * 10) * 10;
          if (pct > loggedPct) {
            loggedPct = pct;
            log.info({ chunks_done: done, chunks: task.chunks, percent: Math.min(100, Math.round((done / task.chunks) * 100)) }, 'usage recompute progress');
          }
        },
        ctx.signal,
      );
      await this.tasks.finish(task.id, ctx.instanceId);
      log.info({ rows }, 'usage recompute done');
    } catch (err) {
      if (err instanceof Stopped) log.info('usage recompute cancelled or taken over; stopped');
      else if (ctx.signal.aborted) {
        await this.tasks.release(task.id, ctx.instanceId);
        log.info('usage recompute handed back (round stopping); it resumes where it stopped');
      } else {
        await this.tasks.fail(task.id, ctx.instanceId, (err as Error).message);
        log.error({ err: (err as Error).message }, 'usage recompute failed');
      }
    }
    return rows;
  }
}

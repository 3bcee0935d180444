import type { JobDefinition } from '../../../scheduler/job.js';
import type { Config } from '../../../config/load.js';
import { Schedule } from '../../../scheduler/schedule.js';

const DAY = 86_400_000;

type Job = Pick<JobDefinition, 'name' | 'scope' | 'settings'>;

/**
 * The second of the next day in which the most enabled rounds start. `every` slots are
 * multiples of the interval since the epoch shifted by the job's offset (`jobs.<name>.offset`,
 * by default a stable hash of its name), so each interval that divides a day has a slot at
 * midnight UTC + its offset; cron slots (offset included) are listed over the day. Jitter is
 * ignored: the worst case is no jitter.
 */
export function busiestSecond(jobs: readonly Job[], nowMs: number): { at: number; cluster: string[]; instance: string[] } {
  const enabled = jobs.filter((j) => j.settings.enabled);
  const d0 = Math.ceil(nowMs / DAY) * DAY;
  const fires = new Map<string, Set<number>>();
  const candidates = new Set<number>([d0]);
  for (const j of enabled) {
    const spec = j.settings.schedule;
    if (spec.kind === 'every') {
      candidates.add(d0 + (spec.offsetMs ?? 0));
      continue;
    }
    const s = new Schedule(spec);
    const set = new Set<number>();
    for (let t = s.next(d0 - 1), n = 0; t < d0 + DAY && n < 2000; t = s.next(t), n++) set.add(t);
    fires.set(j.name, set);
    for (const t of set) candidates.add(t);
  }
  // Starts within the same second count as together: a round lasts longer than the offsets apart.
  const at = (j: Job, t: number) => {
    const spec = j.settings.schedule;
    if (spec.kind === 'cron') return [...fires.get(j.name)!].some((f) => f >= t && f < t + 1000);
    return ((((spec.offsetMs ?? 0) - t) % spec.everyMs) + spec.everyMs) % spec.everyMs < 1000;
  };
  let best = { at: d0, cluster: [] as string[], instance: [] as string[] };
  for (const t of candidates) {
    const starting = enabled.filter((j) => at(j, t));
    if (starting.length > best.cluster.length + best.instance.length) {
      best = { at: t, cluster: starting.filter((j) => j.scope === 'cluster').map((j) => j.name), instance: starting.filter((j) => j.scope !== 'cluster').map((j) => j.name) };
    }
  }
  return best;
}

/** Connections a replica's long-lived loops can hold at once, by what is enabled. */
export function loopConnections(jobs: readonly Job[], config: Config): Array<[string, number]> {
  const on = (name: string) => jobs.some((j) => j.name === name && j.settings.enabled);
  // No heartbeat: a replica beats on its liveness session (coordination/instance-registry.ts), the
  // coordination session counted on its own by pool_budget (or on DATABASE_DIRECT_URL's pool).
  const loops: Array<[string, number]> = [
    ['usage writer', 1],
    // No notification sender: the notifier sends inside the rounds that queue its rows, one statement at a time (counted as theirs).
    ['HTTP requests', 2],
  ];
  if (on('token_refresh')) loops.push(['token refreshes (auth.refresh_concurrency)', config.auth.refresh_concurrency]);
  if (on('scheduler_snapshot')) loops.push(['snapshot consumer', 1]);
  if (on('channel_monitor')) loops.push(['monitor runner', 1]);
  if (on('scheduled_account_test')) loops.push(['account test runner', 1]);
  if (on('batch_image_worker')) loops.push(['image batch worker', 1]);
  return loops;
}

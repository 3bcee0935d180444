import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../modules/area.js';
import type { RunRecord } from '../coordination/run-records.js';
import { parseDuration } from '../config/duration.js';
import { json, route } from './contract.js';
import { RunRecord as RunRecordSchema, SkipCount } from './kernel-schemas.js';

/** How far back a timeline may look, and how many rounds one answer carries (the newest kept). */
export const TIMELINE_MAX_WINDOW_MS = 24 * 3_600_000;
export const TIMELINE_DEFAULT_WINDOW_MS = 15 * 60_000;
export const TIMELINE_MAX_ROUNDS = 2000;
/** Missed slots listed per answer; a job down for a day at 1 s would otherwise be 86,400 marks. */
const MAX_MISSED = 500;

const querySchema = z
  .object({
    since: z
      .string({ error: 'expected one value: an ISO time or a duration back from now (e.g. 15m)' })
      .refine((v) => parseDuration(v) !== null || !Number.isNaN(Date.parse(v)), 'expected an ISO time (2026-01-01T00:00:00Z) or a duration back from now (15m, 1h)')
      .optional()
      .meta({ description: 'an ISO time, or a duration back from now (`15m`, the default; at most 24 h)' }),
    limit: z.coerce.number({ error: 'expected a number' }).int('expected a whole number').min(1, 'expected at least 1').max(TIMELINE_MAX_ROUNDS, `expected at most ${TIMELINE_MAX_ROUNDS}`).optional(),
  })
  .strict();

const time = z.iso.datetime({ offset: true });
const Timeline = z
  .object({
    since: time,
    now: time,
    truncated: z.boolean().meta({ description: 'more rounds than `limit` in the window: the newest are kept' }),
    lanes: z.array(z.object({ instance_id: z.string(), alive: z.boolean(), started_at: time.nullable(), heartbeat_at: time.nullable(), stopped_at: time.nullable() })),
    rounds: z.array(RunRecordSchema),
    missed: z.array(z.object({ job: z.string(), slot: time })).meta({ description: 'slots of a cluster interval job nobody ran' }),
    skips: z.array(SkipCount.extend({ job_name: z.string() })),
    jobs: z.array(z.object({ name: z.string(), scope: z.string(), enabled: z.boolean(), every_ms: z.number().nullable() })),
  })
  .meta({ id: 'Timeline' });

export interface MissedSlot {
  job: string;
  slot: string;
}

/**
 * Slots of an interval job that no replica recorded: the gaps between its recorded slots, and the
 * slots after the last one that are overdue by more than one interval. Only cluster-scoped jobs
 * (an instance-scoped job's slot is per replica, and a replica that is gone misses nothing).
 */
export function missedSlots(rounds: RunRecord[], jobs: { name: string; scope: string; enabled: boolean; everyMs: number | null }[], nowMs: number): MissedSlot[] {
  const out: MissedSlot[] = [];
  for (const job of jobs) {
    if (job.scope !== 'cluster' || !job.everyMs) continue;
    const every = job.everyMs;
    const slots = [...new Set(rounds.filter((r) => r.job_name === job.name && r.trigger === 'schedule').map((r) => r.slot.getTime()))].sort((a, b) => a - b);
    if (!slots.length) continue;
    if (job.enabled) slots.push(nowMs);
    for (let i = 1; i < slots.length && out.length < MAX_MISSED; i++) {
      for (let t = slots[i - 1]! + every; t < slots[i]! && out.length < MAX_MISSED; t += every) {
        if (i === slots.length - 1 && job.enabled && t + 2 * every > nowMs) break; // not overdue yet
        out.push({ job: job.name, slot: new Date(t).toISOString() });
      }
    }
  }
  return out;
}

/**
 * `GET /api/v1/timeline?since=15m&limit=`: every round of the window, with the replica it ran on,
 * its slot, outcome, lock backend and fencing token; the replicas (lanes), slots nobody ran, and
 * the scheduled slots each replica skipped because another led them. Bounded: 24 h, 2,000 rounds.
 */
export function registerTimelineRoutes(api: FastifyInstance, deps: Pick<RouteDeps, 'clock' | 'instances' | 'jobs' | 'records'>): void {
  const summary = 'The rounds of a window per replica, slots nobody ran, skips';
  route(api, { method: 'GET', path: '/timeline', operationId: 'getTimeline', summary, tag: 'timeline', query: querySchema, responses: { 200: json(Timeline) } }, async ({ query: q }) => {
    const now = deps.clock.now();
    const back = q.since === undefined ? TIMELINE_DEFAULT_WINDOW_MS : parseDuration(q.since);
    let since = back !== null ? now - back : Date.parse(q.since!);
    since = Math.max(since, now - TIMELINE_MAX_WINDOW_MS);
    const [window, instances, skips] = await Promise.all([deps.records.window(new Date(since), q.limit ?? TIMELINE_MAX_ROUNDS), deps.instances(), deps.records.allSkips()]);
    const jobs = deps.jobs.map((j) => ({ name: j.name, scope: j.scope, enabled: j.settings.enabled, everyMs: j.settings.schedule.kind === 'every' ? j.settings.schedule.everyMs : null }));
    const seen = new Set(window.rounds.map((r) => r.instance_id));
    const lanes: { instance_id: string; alive: boolean; started_at: Date | null; heartbeat_at: Date | null; stopped_at: Date | null }[] = instances
      .filter((i) => i.alive || seen.has(i.instance_id) || (i.stopped_at ?? i.heartbeat_at).getTime() >= since)
      .map((i) => ({ instance_id: i.instance_id, alive: i.alive, started_at: i.started_at, heartbeat_at: i.heartbeat_at, stopped_at: i.stopped_at }));
    // A replica whose instance row is gone still has its rounds drawn.
    for (const id of seen) if (!lanes.some((l) => l.instance_id === id)) lanes.push({ instance_id: id, alive: false, started_at: null, heartbeat_at: null, stopped_at: null });
    return {
      since: new Date(since).toISOString(),
      now: window.dbNow.toISOString(),
      truncated: window.truncated,
      lanes,
      rounds: window.rounds,
      missed: missedSlots(window.rounds, jobs, window.dbNow.getTime()),
      skips: skips.filter((s) => s.last_skip_at && s.last_skip_at.getTime() >= since),
      jobs: jobs.map((j) => ({ name: j.name, scope: j.scope, enabled: j.enabled, every_ms: j.everyMs })),
    };
  });
}

import type { Clock } from '../time/clock.js';
import type { Deadline } from '../time/deadline.js';
import type { Logger } from '../telemetry/logger.js';
import type { JobDefinition } from './job.js';
import type { AdoptedSchedule, ClusterSchedules, ScheduleVote } from '../coordination/cluster-schedules.js';
import { describeDifferences, differingKeys, fingerprintOf, scheduleSpecOf, type KeyDifference } from '../coordination/schedule-fingerprint.js';
import { ServiceLoop, type LoopTickCounter } from '../workers/service-loop.js';
import type { WakeHub } from '../workers/wake-hub.js';

/** The wake-up topic of migration 037's triggers: a vote changed, a schedule was adopted, a replica stopped. */
export const SCHEDULE_TOPIC = 'job_schedules';

/** This replica's schedule of a job differs from the one the cluster runs (health `config_drift`). */
export interface ScheduleDrift {
  job: string;
  keys: KeyDifference[];
  /** `config_drift: this replica's jobs.canary differs from the cluster's schedule (adopted …): every 3s here, 2s in the cluster` */
  reason: string;
  adoptedAt: Date;
}

/**
 * This replica's side of "one schedule per job" (issue 49; the rule: `coordination/cluster-schedules.ts`).
 * Each check publishes this replica's fingerprints (every job's), applies the adoption rule and keeps the
 * outcome: which cluster-scoped jobs this replica is off the cluster's schedule for. The round runner skips a
 * scheduled round of such a job before the lock (cluster-scoped jobs; the claim re-checks
 * atomically whatever this copy says) and the job views read `config_drift` from it.
 *
 * When it checks: once before the job loops start (`publish` in the runtime's start-up), on every
 * `job_schedules` notification (a replica's vote, an adoption, a clean stop), when the wake-up
 * listener (re)connects, and every `cluster.instance_heartbeat` (a replica that died is only seen
 * by looking). A drift is logged as a warning once per change, its end once at info.
 */
export class ScheduleBook {
  private readonly own = new Map<string, ScheduleVote>();
  private readonly instanceScoped: Set<string>;
  private drifts = new Map<string, ScheduleDrift>();
  private readonly loop: ServiceLoop;

  constructor(
    private readonly o: {
      store: ClusterSchedules;
      jobs: readonly JobDefinition[];
      clock: Clock;
      log: Logger;
      /** The check's interval: the replica's heartbeat interval. */
      pollMs: number;
      /** Embedded mode: one process, so its own schedule is the cluster's. */
      adoptOwn: boolean;
      /** Per job, the live replicas off the adopted schedule (`relay_jobs_config_drift`). */
      offSchedule?: (job: string, replicas: number) => void;
      ticks?: LoopTickCounter;
    },
  ) {
    this.instanceScoped = new Set(o.jobs.filter((j) => j.scope === 'instance').map((j) => j.name));
    for (const j of o.jobs) {
      const spec = scheduleSpecOf(j.settings);
      this.own.set(j.name, { job: j.name, fingerprint: fingerprintOf(spec), spec });
    }
    this.loop = new ServiceLoop({
      name: 'job_schedules',
      clock: o.clock,
      log: o.log,
      ticks: o.ticks,
      backstopMs: o.pollMs,
      tick: async () => ({ items: await this.publish() }),
    });
  }

  /** This replica's fingerprint of `job` (what its claims carry), or null for a job it does not know. */
  fingerprint(job: string): string | null {
    return this.own.get(job)?.fingerprint ?? null;
  }

  /** How this replica's schedule of `job` differs from the cluster's, as of the last check; null when it is on it. */
  drift(job: string): ScheduleDrift | null {
    return this.drifts.get(job) ?? null;
  }

  all(): ScheduleDrift[] {
    return [...this.drifts.values()];
  }

  listen(wakes: WakeHub): void {
    wakes.on(SCHEDULE_TOPIC, (why) => this.loop.wake(why));
  }

  /** Asks for a check now (a claim found the adopted schedule changed under this copy). */
  recheck(): void {
    this.loop.wake('claim_refused');
  }

  /** One check: publish, adopt, compare. Returns how many jobs changed drift state here. */
  async publish(): Promise<number> {
    const adopted = await this.o.store.publish([...this.own.values()], { adoptOwn: this.o.adoptOwn });
    const next = new Map<string, ScheduleDrift>();
    for (const a of adopted.values()) {
      // Instance-scoped rounds serve the replica they run on (its counters, its share of refreshes, a worker
      // enabled on some replicas only): no replica's schedule adds a round to another's, so they do not drift.
      if (this.instanceScoped.has(a.job)) continue;
      this.o.offSchedule?.(a.job, a.offSchedule);
      const mine = this.own.get(a.job);
      if (!mine || mine.fingerprint === a.fingerprint) continue;
      next.set(a.job, driftOf(a, mine));
    }
    let changed = 0;
    for (const job of new Set([...this.drifts.keys(), ...next.keys()])) {
      const was = this.drifts.get(job);
      const now = next.get(job);
      if (was?.reason === now?.reason) continue;
      changed++;
      if (now) this.o.log.warn({ job, config_drift: now.keys.map((k) => k.key), adopted_at: now.adoptedAt.toISOString() }, `job ${job}: ${now.reason}`);
      else this.o.log.info({ job }, `job ${job}: this replica's schedule is the cluster's again; it runs the job`);
    }
    this.drifts = next;
    return changed;
  }

  start(): void {
    this.loop.start();
  }

  stop(by: Deadline): Promise<number> {
    return this.loop.stop(by);
  }
}

function driftOf(a: AdoptedSchedule, mine: ScheduleVote): ScheduleDrift {
  const keys = differingKeys(mine.spec, a.spec);
  const reason =
    `config_drift: this replica's jobs.${a.job} differs from the cluster's schedule (adopted ${a.adoptedAt.toISOString()}): ${describeDifferences(keys)}; ` +
    'this replica runs no scheduled round of it until every live replica has one schedule (docs/coordination.md)';
  return { job: a.job, keys, reason, adoptedAt: a.adoptedAt };
}

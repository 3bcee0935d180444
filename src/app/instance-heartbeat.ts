import type { Config } from '../config/load.js';
import { formatDuration } from '../config/duration.js';
import type { InstanceRegistry } from '../coordination/instance-registry.js';
import { deadReplicas } from '../coordination/instance-retention.js';
import type { SkipCounter } from '../coordination/skip-counter.js';
import type { IdleRounds } from '../coordination/idle-rounds.js';
import type { LivenessSession } from '../coordination/liveness.js';
import type { Memberships } from '../coordination/memberships.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { Logger } from '../telemetry/logger.js';
import type { Clock } from '../time/clock.js';
import type { Deadline } from '../time/deadline.js';
import { ProcessSampler } from '../telemetry/process-sampler.js';
import { HEALTH_STATES, type JobView } from '../modules/job-views.js';
import type { BackendIdentity } from '../coordination/backend-identity.js';
import { ServiceLoop } from '../workers/service-loop.js';
import { loopBook, type LoopsReport } from '../workers/loop-book.js';

/** How long the job health gauges read at a scrape stay fresh (the cluster-wide job views: six reads). */
const HEALTH_EVERY_MS = 15_000;
/** How often the beat re-reads the backends' identity (Redis INFO, system_identifier): a Redis restart or failover shows within a minute. */
const IDENTITY_EVERY_MS = 60_000;

/**
 * The replica's beat, every `cluster.instance_heartbeat`: measures clock skew against the
 * database (the scheduler corrects its slots by it), refreshes the `instances` row with this
 * process's figures since the previous beat (and notices another process with this instance
 * id), hands every declared membership its live members (coordination/memberships.ts), and
 * exports job health. Nothing else: old `job_runs` are pruned by ops_cleanup, the one
 * retention round, under `scheduler.run_retention`. The beat is a `ServiceLoop`
 * (`instance_heartbeat`): one beat a tick, the next one interval after it ends.
 */
export class InstanceHeartbeat {
  private readonly loop: ServiceLoop;
  private stopped = false;
  private lastHealth = 0;
  private lastIdentity = 0;
  private identity: BackendIdentity | null = null;
  /** What the scheduler adds to this replica's clock to get the database's. */
  offsetMs = 0;
  private readonly sampler: ProcessSampler;

  constructor(
    private readonly deps: {
      config: Config;
      registry: InstanceRegistry;
      metrics: Metrics;
      log: Logger;
      clock: Clock;
      views: () => Promise<JobView[]>;
      /** Scheduled skips since the last beat, written as one summary row per job (coordination v2). */
      skips: SkipCounter;
      /** Scheduled instance rounds that found nothing to do, written as their finished records with the beat (issue 26). */
      idleRounds?: IdleRounds;
      liveness: LivenessSession | null;
      /** Updated from every beat's member lists (the beat's statement returns them). */
      memberships: Memberships;
      /** This process's figures, sampled (and reset) once per beat; a test may bring its own source. */
      sampler?: ProcessSampler;
      /** The Redis and database this replica talks to, re-sent with a beat when it changed (the doctor compares replicas). */
      identity?: () => Promise<BackendIdentity>;
    },
  ) {
    this.sampler = deps.sampler ?? new ProcessSampler();
    const every = deps.config.cluster.instance_heartbeat;
    this.loop = new ServiceLoop({
      name: 'instance_heartbeat',
      clock: deps.clock,
      log: deps.log,
      ticks: deps.metrics.loopTicks,
      backstopMs: every,
      tick: () => this.beat(),
    });
    // A reopened liveness session (after a drop) has a new key, and until a beat publishes it the row
    // names the old one, no longer granted: the others would judge this live replica dead (its
    // memberships, its refresh leases) for up to a heartbeat. So the beat goes at once. (The first
    // session opens before the loop starts: nothing to wake then.)
    deps.liveness?.onOpened(async () => this.loop.wake('liveness session opened'));
  }

  async measureSkew(atStart = false): Promise<void> {
    this.applySkew(await this.deps.registry.measureSkew(), atStart);
  }

  private applySkew(skew: number, atStart = false): void {
    const { metrics, log, config } = this.deps;
    this.offsetMs = -skew;
    metrics.clockSkew.set(skew / 1000);
    if (Math.abs(skew) > config.cluster.max_clock_skew) {
      log.warn(
        { clock_skew_ms: Math.round(skew), max_clock_skew_ms: config.cluster.max_clock_skew },
        `${atStart ? 'at start: ' : ''}this replica's clock is ${Math.round(skew)}ms off the database clock (cluster.max_clock_skew ${formatDuration(config.cluster.max_clock_skew)}); slots use the database clock, but fix NTP`,
      );
    }
  }

  start(): void {
    this.deps.metrics.jobHealthRefresh = () => this.refreshHealth();
    this.loop.start();
  }

  /**
   * The job health gauges read the whole cluster's records, so they are read when the metrics
   * are scraped (at most every 15 s), not on a timer: an idle replica nobody scrapes pays nothing
   * (issue 26). A failed read keeps the last values and is logged.
   */
  async refreshHealth(): Promise<void> {
    const { clock, metrics, log } = this.deps;
    if (this.stopped || clock.now() - this.lastHealth < HEALTH_EVERY_MS) return;
    this.lastHealth = clock.now();
    try {
      for (const view of await this.deps.views()) {
        for (const h of HEALTH_STATES) metrics.jobHealth.set({ job: view.name, health: h }, view.health === h ? 1 : 0);
      }
      metrics.replicasDead.set(deadReplicas(await this.deps.registry.list(), clock.now()).length);
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'job health gauges not refreshed');
    }
  }

  /** No further beat; waits until `by` for a beat in flight and returns 1 if it was still running. */
  async stop(by: Deadline): Promise<number> {
    this.stopped = true;
    if (this.deps.metrics.jobHealthRefresh) this.deps.metrics.jobHealthRefresh = null;
    const left = await this.loop.stop(by);
    this.sampler.close();
    return left;
  }

  /** At shutdown: the skips counted and the idle rounds kept since the last beat are written, so nothing is lost. */
  async flushSkips(): Promise<void> {
    const skips = this.deps.skips.take();
    const idle = this.deps.idleRounds?.take() ?? [];
    if (skips.length || idle.length) await this.deps.registry.beat(-this.offsetMs, null, skips, null, idle);
  }

  /** Re-reads the identity once a minute; a Redis that does not answer keeps the last identity it gave. */
  async readIdentity(force = false): Promise<void> {
    const { identity, clock, registry } = this.deps;
    if (!identity || (!force && clock.now() - this.lastIdentity < IDENTITY_EVERY_MS)) return;
    this.lastIdentity = clock.now();
    const read = await identity();
    this.identity = { ...read, redis: read.redis ?? this.identity?.redis ?? null };
    registry.setBackends(this.identity);
  }

  /**
   * What every loop of this runtime has been doing (the loops counting ticks on its counter), for
   * per-replica job health (`scheduler/health.ts`): sent with every beat, so a reader never sees
   * it older than a beat plus the statement's time, and sees this replica's heartbeat interval.
   */
  loopsReport(): LoopsReport {
    return { heartbeat_ms: this.deps.config.cluster.instance_heartbeat, loops: loopBook(this.deps.metrics.loopTicks).report(this.deps.clock.now()) };
  }

  /** One tick. A failed beat gives its skips back (the next beat writes them) and is logged by the loop as a failed tick. */
  private async beat(): Promise<{ items: number }> {
    const { registry, metrics, log, config } = this.deps;
    const skips = this.deps.skips.take();
    const idle = this.deps.idleRounds?.take() ?? [];
    try {
      await this.readIdentity();
      // One statement: the beat, the clock-skew round trip, the skip summary, the idle rounds' records, the process figures, the loop report, and the liveness self-check.
      const beat = await registry.beat(-this.offsetMs, this.deps.liveness, skips, this.sampler.sample(), idle, this.loopsReport());
      if (beat.skewMs !== null) this.applySkew(beat.skewMs);
      // The areas that declared a membership hear its changes (Membership.onChange) and say what they mean.
      if (beat.members) this.deps.memberships.update(beat.members);
      if (beat.registeredAgain)
        log.warn({ instance_id: config.instance.id }, "this replica's instances row was gone (ops_cleanup prunes replicas silent for a week: was it frozen or cut off that long?); registered again");
      metrics.instanceConflict.set(beat.mine ? 0 : 1);
      if (!beat.mine) {
        log.error(
          { instance_id: config.instance.id },
          `INSTANCE ID CONFLICT: another live process registered instance id "${config.instance.id}"; two replicas share one id. Give each replica its own RELAY_JOBS_INSTANCE_ID`,
        );
      }
    } catch (err) {
      this.deps.skips.restore(skips);
      // A data error (SQLSTATE class 22) is the rows', not the database's: given back, they would fail every beat after.
      if (/^22/.test(String((err as { code?: unknown }).code ?? '')))
        log.error({ err: (err as Error).message, rounds: idle.length }, 'round records refused by the database for their content; dropped');
      else this.deps.idleRounds?.restore(idle);
      throw err;
    }
    return { items: 1 };
  }
}

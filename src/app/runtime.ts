// The composition root: the parts live beside it (backends, wiring, heartbeat, job views, ladder); here, the order of start and stop.
import type { RedisClient } from '../coordination/redis-client.js';
import type { Config } from '../config/load.js';
import { formatDuration } from '../config/duration.js';
import type { Db } from '../store/db.js';
import type { PgAdvisoryLock } from '../coordination/advisory-lock.js';
import { buildLeaderLock } from './leader-lock-wiring.js';
import { readiness } from './readiness.js';
import { Scheduler, manyListeners } from '../scheduler/scheduler.js';
import { RoundRunner, type RoundReport } from '../scheduler/round-runner.js';
import { LivenessSession } from '../coordination/liveness.js';
import { wireWakeups, type Wakeups } from './wakeups-wiring.js';
import { RunRecords } from '../coordination/run-records.js';
import { InstanceRegistry, type InstanceInfo } from '../coordination/instance-registry.js';
import { buildJobs, memberships, type AnyJobModule, type Services } from './registry.js';
import type { BuiltJob } from '../modules/define-job.js';
import type { ForcedExitSaver } from '../modules/wiring.js';
import { Metrics } from '../telemetry/metrics.js';
import { createLogger, type Logger } from '../telemetry/logger.js';
import { systemClock, type Clock, type Random } from '../time/clock.js';
import { VERSION } from '../version.js';
import { redactUrl } from '../config/redact-url.js';
import { openBackends, type Backends } from './backends.js';
import { embeddedAdminToken } from './admin-token.js';
import { loadWirings, wireServices } from './services-wiring.js';
import { InstanceHeartbeat } from './instance-heartbeat.js';
import type { Memberships } from '../coordination/memberships.js';
import { jobViews, type JobView } from '../modules/job-views.js';
import { runShutdownLadder, type Ingress, type Stoppable } from './shutdown-ladder.js';
import { runtimeRungs } from './runtime-rungs.js';
import { readBackendIdentity } from '../coordination/backend-identity.js';
import { DatabaseMarker, claimDatabaseMarker, keepDatabaseMarker } from '../coordination/database-marker.js';
import { JobPauses } from '../coordination/job-pauses.js';
import { PauseBook } from '../scheduler/pause-book.js';
import { initTracing } from '../telemetry/tracing.js';
import { buildScheduleBook } from './schedule-book-wiring.js';
import type { ScheduleBook } from '../scheduler/schedule-book.js';

export type { JobView } from '../modules/job-views.js';

export interface RuntimeOptions {
  clock?: Clock;
  random?: Random;
  logger?: Logger;
  /** False for one-shot CLI commands: no row in `instances`, no heartbeat. */
  register?: boolean;
  /** A library user's own jobs, declared with `defineJob`, run beside the built-in ones. */
  jobs?: readonly AnyJobModule[];
  /** A stop signal during start-up: ends a wait for an unanswering server at once (`StartupInterrupted`, app/startup-abort.ts). */
  signal?: AbortSignal;
}

/**
 * The composition root: `create` builds the jobs (config errors before any connection), opens
 * the backends (backends.ts), wires every area's services (services-wiring.ts), and registers
 * the instance; `start` begins scheduling and heartbeats; `shutdown` runs the ladder of
 * invariant 4 (shutdown-ladder.ts), each rung named, bounded and isolated.
 */
export class Runtime {
  readonly metrics = new Metrics({ defaultMetrics: true });
  readonly scheduler: Scheduler;
  readonly sessions: Services['sessions'];
  readonly registry: InstanceRegistry;
  readonly records: RunRecords;
  /** Pause and resume (issue 49): this replica's copy of the paused jobs, and the changes. */
  readonly pauses: PauseBook;
  /** One schedule per job (issue 49): this replica's fingerprints, the cluster's adopted schedules, its drift. */
  readonly schedules: ScheduleBook;
  readonly services: Services;
  readonly db: Db;
  readonly redis: RedisClient | null;
  readonly startedAt: Date;
  adminToken: string | undefined;
  /** False in a one-shot CLI command (`register: false`): this process is not one of the replicas. */
  registers = true;
  private readonly runner: RoundRunner;
  /** Crash detection (coordination v2): a session-held advisory lock that dies with this process. */
  private readonly liveness: LivenessSession | null;
  /** The leader lock while Redis is down: on the liveness session (or one session of its own), never a pool connection per round. */
  private readonly fallbackLock: PgAdvisoryLock | null;
  private readonly heartbeat: InstanceHeartbeat;
  /** Which database this Redis key space belongs to (cluster mode): set or checked at start, kept by the heartbeat. */
  private readonly marker: DatabaseMarker | null;
  private readonly wakeups: Wakeups;
  /** The memberships the areas declared, each with its live members (fed by the heartbeat). */
  readonly memberships: Memberships;
  private readonly serviceRungs: Stoppable[];
  private readonly prepare: () => Promise<void>;
  private readonly registered: (bootId: string) => void;
  readonly forcedExitSavers: ForcedExitSaver[];
  private readonly shutdownController = manyListeners(new AbortController());
  private shuttingDown: Promise<void> | null = null;
  private ingress: Ingress | null = null;

  private constructor(
    readonly config: Config,
    private readonly backends: Backends,
    readonly log: Logger,
    readonly clock: Clock,
    random: Random,
    readonly jobs: BuiltJob[],
    bindServices: (s: Services) => void,
    wirings: Awaited<ReturnType<typeof loadWirings>>,
  ) {
    const { db, redis } = backends;
    [this.db, this.redis] = [db, redis];
    this.startedAt = new Date(clock.now());
    const instanceId = config.instance.id;
    this.liveness = config.mode === 'cluster' && config.cluster.crash_detection === 'session' ? new LivenessSession(backends.sessionDb, log, 1000, clock, this.metrics.loopTicks) : null;
    this.pauses = new PauseBook({ store: new JobPauses(db), clock, log, pollMs: config.cluster.instance_heartbeat, ticks: this.metrics.loopTicks });
    this.schedules = buildScheduleBook(config, db, jobs, clock, log, this.metrics);
    const leader = buildLeaderLock(config, backends, this.liveness, this.metrics, log, clock);
    this.fallbackLock = leader.fallback;
    const runner = (this.runner = new RoundRunner({
      db,
      clock,
      lock: leader.lock,
      log,
      metrics: this.metrics,
      instanceId,
      toleratedFutureMs: 500,
      shutdown: this.shutdownController.signal,
      liveness: this.liveness ?? undefined,
      deferIdleRecords: true,
      pauses: this.pauses,
      schedules: this.schedules,
    }));
    this.records = new RunRecords(db);
    this.memberships = memberships(instanceId, jobs);
    this.registry = new InstanceRegistry(db, clock, {
      instanceId,
      env: config.instance.env,
      mode: config.mode,
      httpPort: config.http.port,
      version: VERSION,
      heartbeatMs: config.cluster.instance_heartbeat,
      memberships: this.memberships.names,
      joined: this.memberships.joined,
    });
    this.marker = config.mode === 'cluster' && redis ? new DatabaseMarker(redis, { prefix: config.redis.key_prefix, env: config.instance.env }, instanceId, () => clock.now()) : null;
    const identity = () => readBackendIdentity(db, redis, { poolSize: config.mode === 'cluster' ? config.database.pool_size : null, keyPrefix: redis ? config.redis.key_prefix : null });
    this.heartbeat = new InstanceHeartbeat({
      config,
      registry: this.registry,
      metrics: this.metrics,
      log,
      clock,
      views: () => this.jobViews(),
      skips: runner.skips,
      idleRounds: runner.idleRounds,
      liveness: this.liveness,
      memberships: this.memberships,
      identity: async () => keepDatabaseMarker(await identity(), this.marker, log),
    });
    this.scheduler = new Scheduler({
      jobs,
      runner,
      clock,
      random,
      log,
      clockOffsetMs: () => this.heartbeat.offsetMs,
      lastSlot: (job) => runner.slotClaims.lastSlot(job),
    });
    this.wakeups = wireWakeups(config, db, this.liveness, log, this.metrics);
    this.pauses.listen(this.wakeups.hub);
    this.schedules.listen(this.wakeups.hub);
    const { box } = backends;
    const ctx = { config, db, redis, box, clock, random, log, metrics: this.metrics, runtime: this, memberships: this.memberships, liveness: this.liveness, wakes: this.wakeups.hub };
    const wired = wireServices(ctx, wirings);
    this.services = wired.services;
    this.sessions = wired.services.sessions;
    this.serviceRungs = wired.rungs;
    this.prepare = wired.prepare!;
    this.registered = wired.registered;
    this.forcedExitSavers = wired.forcedExitSavers;
    bindServices(this.services);
  }

  static async create(config: Config, opts: RuntimeOptions = {}): Promise<Runtime> {
    const clock = opts.clock ?? systemClock;
    const log = opts.logger ?? createLogger({ level: config.logging.level, format: config.logging.format, instanceId: config.instance.id, env: config.instance.env });
    for (const w of config.warnings ?? []) log.warn(`config: ${w}`);
    // OpenTelemetry traces, only when OTEL_EXPORTER_OTLP_ENDPOINT is set (a replica, not a one-shot command); the SDK is loaded only then.
    if (opts.register !== false) await initTracing({ log, now: () => clock.now(), serviceVersion: VERSION, instanceId: config.instance.id, env: config.instance.env, redactUrl });
    // Jobs are built (their config checked) before any connection; their services are bound once connected.
    let bound: Services | null = null;
    const jobs = buildJobs(
      config,
      () => {
        if (!bound) throw new Error('job services used before the runtime bound them');
        return bound;
      },
      opts.jobs,
    );
    const wirings = await loadWirings();
    const backends = await openBackends(config, log, opts.signal, opts.register !== false); // a replica waits for a database not up yet; a one-shot command does not
    try {
      const rt = new Runtime(config, backends, log, clock, opts.random ?? Math.random, jobs, (s) => (bound = s), wirings);
      rt.adminToken = config.http.admin_token ?? (config.mode === 'embedded' ? embeddedAdminToken(config.database.data_dir, log) : undefined);
      if (!rt.adminToken) log.warn('RELAY_JOBS_ADMIN_TOKEN is not set: the /api/v1 admin API answers 401 until it is');
      await rt.heartbeat.measureSkew(true);
      if (config.mode === 'cluster') await rt.registry.refuseMixedEnv(config.cluster.allow_mixed_env, log, opts.register !== false ? config.redis.key_prefix : null);
      // A replica (not a one-shot command) on another database than this Redis key space's is refused, naming both.
      if (opts.register !== false && rt.marker) await claimDatabaseMarker(rt.marker, backends.db, log);
      await rt.runner.slotClaims.ensureJobs(jobs.map((j) => j.name));
      await rt.pauses.load();
      await rt.prepare();
      rt.registers = opts.register !== false;
      if (rt.registers) {
        await rt.heartbeat.readIdentity(true);
        await rt.registry.register();
        await rt.schedules.publish(); // before any job loop: a replica off the cluster's schedule never runs its first slot
        await rt.liveness?.start();
        await rt.wakeups.start();
        // Registered: the areas learn the boot id (refresh leases name their holder's boot, so the others take them over when it dies).
        rt.registered(rt.registry.bootId);
      }
      backends.started(); // Redis commands now fail after redis.command_timeout
      return rt;
    } catch (err) {
      await backends.close(log);
      throw backends.startupError(err);
    }
  }

  start(ingress?: Ingress): void {
    if (this.shuttingDown) throw new Error('Runtime.start() after shutdown(): its connections are closed, a runtime runs once; create a new one with Runtime.create()');
    this.ingress = ingress ?? null;
    this.pauses.start();
    if (this.registers) this.schedules.start();
    this.scheduler.start();
    for (const job of this.jobs) if (job.settings.enabled) void job.start?.(this.log.child({ job: job.name }));
    this.metrics.ready.set(1);
    this.heartbeat.start();
  }

  get isShuttingDown(): boolean {
    return this.shuttingDown !== null;
  }

  readiness(): Promise<{ ready: boolean; checks: Record<string, string> }> {
    return readiness({ db: this.db, redis: this.redis, metrics: this.metrics, shuttingDown: this.isShuttingDown });
  }

  jobViews(): Promise<JobView[]> {
    return jobViews({
      jobs: this.jobs,
      records: this.records,
      registry: this.registry,
      scheduler: this.scheduler,
      startedAt: this.startedAt,
      abortGraceMs: this.config.scheduler.abort_grace,
      pauses: this.pauses,
      drift: (job) => this.schedules.drift(job),
    });
  }

  instances(): Promise<InstanceInfo[]> {
    return this.registry.list();
  }

  runNow(name: string, onStart?: (r: { runId: number; token: number }) => void, opts: { force?: boolean } = {}): Promise<RoundReport> {
    return this.scheduler.runNow(name, onStart, opts);
  }

  requestRound(name: string): void {
    this.scheduler.requestRound(name);
  }

  /** Idempotent: a second call returns the first call's promise. */
  shutdown(reason = 'shutdown requested'): Promise<void> {
    this.shuttingDown ??= this.runShutdown(reason);
    return this.shuttingDown;
  }

  private async runShutdown(reason: string): Promise<void> {
    const graceMs = this.config.shutdown.grace;
    this.log.info({ reason, grace: formatDuration(graceMs) }, 'shutdown: readiness false, closing HTTP, stopping rounds');
    this.metrics.ready.set(0);
    // Each rung names its phase (SHUTDOWN_PHASES, modules/wiring.ts); registration order decides within a phase.
    const ladder = runtimeRungs({
      ingress: this.ingress,
      heartbeat: this.heartbeat,
      registry: this.registry,
      scheduler: this.scheduler,
      abortRounds: () => this.shutdownController.abort(),
      schedules: this.schedules,
      pauses: this.pauses,
      jobs: this.jobs,
      serviceRungs: this.serviceRungs,
      fallbackLock: this.fallbackLock,
      wakeups: this.wakeups,
      liveness: this.liveness,
      backends: this.backends,
      log: this.log,
    });
    await runShutdownLadder(ladder, graceMs, this.clock, this.log);
    this.log.info('shutdown complete');
  }
}

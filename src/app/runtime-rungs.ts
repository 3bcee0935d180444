import type { PgAdvisoryLock } from '../coordination/advisory-lock.js';
import type { InstanceRegistry } from '../coordination/instance-registry.js';
import type { LivenessSession } from '../coordination/liveness.js';
import type { BuiltJob } from '../modules/define-job.js';
import type { PauseBook } from '../scheduler/pause-book.js';
import type { ScheduleBook } from '../scheduler/schedule-book.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { Logger } from '../telemetry/logger.js';
import { flushTracing } from '../telemetry/tracing.js';
import type { Backends } from './backends.js';
import type { InstanceHeartbeat } from './instance-heartbeat.js';
import type { Ingress, Stoppable } from './shutdown-ladder.js';
import type { Wakeups } from './wakeups-wiring.js';

/** What a replica's own rungs stop: the runtime's parts, handed over at shutdown. */
export interface RuntimeParts {
  ingress: Ingress | null;
  heartbeat: InstanceHeartbeat;
  registry: InstanceRegistry;
  scheduler: Scheduler;
  /** Aborts the rounds in flight (their signal), before the scheduler waits for them. */
  abortRounds: () => void;
  schedules: ScheduleBook;
  pauses: PauseBook;
  jobs: readonly BuiltJob[];
  /** The areas' rungs (services-wiring.ts), each with its phase. */
  serviceRungs: readonly Stoppable[];
  fallbackLock: PgAdvisoryLock | null;
  wakeups: Wakeups;
  liveness: LivenessSession | null;
  backends: Backends;
  log: Logger;
}

/**
 * The shutdown ladder's rungs of one replica (invariant 4), in the order the phases run them
 * (shutdown-ladder.ts sorts by phase; registration order decides within a phase).
 */
export function runtimeRungs(p: RuntimeParts): Stoppable[] {
  const jobStops: Stoppable[] = [...p.jobs]
    .reverse()
    .filter((job) => job.stop && job.settings.enabled)
    .map((job) => ({ name: `job ${job.name}`, phase: 'jobs', minMs: 1000, stop: async (by) => ((await job.stop!(by)) ? `${job.name}: work still running after the grace period` : undefined) }));
  return [
    { name: 'http', phase: 'ingress', stop: () => p.ingress?.stopAccepting() },
    // A beat in flight is waited for: one landing after `instance record` would mark this replica alive again.
    { name: 'instance heartbeat', phase: 'ingress', stop: async (by) => ((await p.heartbeat.stop(by)) ? 'a heartbeat still running after the grace period' : undefined) },
    // First of the rounds phase: the other members rebalance at their next beat while this replica drains.
    { name: 'memberships', phase: 'rounds', stop: () => p.registry.leaveMemberships() },
    {
      name: 'rounds',
      phase: 'rounds',
      stop: async (by) => {
        p.abortRounds();
        const busy = await p.scheduler.stop(by);
        return busy.length ? `rounds still running after the grace period (${busy.join(', ')}); their leases will expire` : undefined;
      },
    },
    { name: 'schedule book', phase: 'rounds', stop: async (by) => ((await p.schedules.stop(by)) ? 'a schedule check still running after the grace period' : undefined) },
    { name: 'pause book', phase: 'rounds', stop: async (by) => ((await p.pauses.stop(by)) ? 'a pause read still running after the grace period' : undefined) },
    ...jobStops,
    ...p.serviceRungs,
    { name: 'skip summary', phase: 'coordination', stop: () => p.heartbeat.flushSkips() },
    {
      name: 'coordination session',
      phase: 'coordination',
      stop: async (by) => {
        p.fallbackLock?.close();
        await p.wakeups.stop();
        if (await p.liveness?.stop(by)) return 'a liveness session still opening after the grace period; it closes when opened';
      },
    },
    { name: 'instance record', phase: 'coordination', stop: () => p.registry.markStopped() },
    { name: 'http connections', phase: 'connections', stop: (by) => p.ingress?.close(by) },
    { name: 'connections', phase: 'connections', stop: () => p.backends.close(p.log) },
    // Last: every span has ended (rounds, requests); what the exporter still buffers goes out within the grace left.
    { name: 'traces', phase: 'connections', stop: (by) => flushTracing(by) },
  ];
}

import type { Clock } from '../time/clock.js';
import type { Logger } from '../telemetry/logger.js';

/**
 * The phases of the shutdown ladder, in the order they run (invariant 4): stop taking work, stop
 * the rounds, stop the jobs' own services, drain the areas' services (usage flush, outbox,
 * runners), then coordination (skip summary, liveness, instance record), then connections.
 * A rung declares its phase; within a phase, rungs run in registration order. This list is the
 * one place the order is written.
 */
export const SHUTDOWN_PHASES = ['ingress', 'rounds', 'jobs', 'services', 'coordination', 'connections'] as const;
export type ShutdownPhase = (typeof SHUTDOWN_PHASES)[number];

/**
 * One rung of the shutdown ladder. `stop` gets the time left until the ladder's deadline (at
 * least `minMs`: a rung that must run, such as the final usage flush, gets its floor even when
 * earlier rungs used the grace up). A string it returns is a warning worth logging.
 */
export interface Stoppable {
  name: string;
  /** Where in the ladder it runs (default `services`: an area's rung). */
  phase?: ShutdownPhase;
  minMs?: number;
  stop(withinMs: number): Promise<string | void> | string | void;
}

/** The rungs in ladder order: by phase, then registration order within a phase (a stable sort). */
export function ladderOrder(steps: readonly Stoppable[]): Stoppable[] {
  const rank = (s: Stoppable) => SHUTDOWN_PHASES.indexOf(s.phase ?? 'services');
  return steps
    .map((s, i) => ({ s, i }))
    .sort((a, b) => rank(a.s) - rank(b.s) || a.i - b.i)
    .map(({ s }) => s);
}

/**
 * Runs the rungs in ladder order (`ladderOrder`). Each rung's failure is logged and isolated: the next rung still
 * runs, because a failed HTTP close must not keep the usage writer from draining (invariant 4).
 */
export async function runShutdownLadder(steps: readonly Stoppable[], deadlineAt: number, clock: Clock, log: Logger): Promise<void> {
  for (const step of ladderOrder(steps)) {
    const withinMs = Math.max(step.minMs ?? 0, deadlineAt - clock.now());
    try {
      const warning = await step.stop(withinMs);
      if (warning) log.warn({ step: step.name }, `shutdown: ${warning}`);
    } catch (err) {
      log.error({ step: step.name, err: (err as Error).message }, `shutdown: ${step.name} failed; continuing with the next step`);
    }
  }
}

/** What takes requests in: stops taking new ones right after readiness goes false; what is still open is closed at the end of the grace. */
export interface Ingress {
  stopAccepting(): void;
  /** Waits up to `withinMs` for requests in flight, then closes every connection left; a string is a warning. */
  close(withinMs: number): Promise<string | void>;
}

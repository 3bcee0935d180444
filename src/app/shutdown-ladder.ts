import type { Clock, TimerHandle } from '../time/clock.js';
import { Deadline } from '../time/deadline.js';
import type { Logger } from '../telemetry/logger.js';
import { SHUTDOWN_PHASES, type Stoppable } from '../modules/wiring.js';

// The phases and the rung type live beside the areas' wiring (modules/wiring.ts): areas declare their rungs' phase there.
export { SHUTDOWN_PHASES, type ShutdownPhase, type Stoppable } from '../modules/wiring.js';

/** The rungs in ladder order: by phase, then registration order within a phase (a stable sort). */
export function ladderOrder(steps: readonly Stoppable[]): Stoppable[] {
  const rank = (s: Stoppable) => SHUTDOWN_PHASES.indexOf(s.phase ?? 'services');
  return steps
    .map((s, i) => ({ s, i }))
    .sort((a, b) => rank(a.s) - rank(b.s) || a.i - b.i)
    .map(({ s }) => s);
}

/** How often a rung that has not returned is named in the log: what a slow shutdown is waiting for. */
export const SHUTDOWN_PROGRESS_EVERY_MS = 10_000;

/**
 * Runs the rungs in ladder order (`ladderOrder`), all under ONE deadline made here, `graceMs` from
 * now on `clock`: each rung gets that deadline itself, so the time a rung took is gone for the next,
 * or pushed out to now + `minMs` for a rung with a floor (`Deadline.atLeast`). Each rung's failure is
 * logged and isolated: the next rung still runs, because a failed HTTP close must not keep the usage
 * writer from draining (invariant 4). A rung still running after SHUTDOWN_PROGRESS_EVERY_MS is named
 * in the log, and again at each interval: at info within its limit (the time its deadline left it at
 * its start: a drain taking its time), at error once past it (a rung that ignores its limit is a
 * defect, and the ladder has no other way to show which one holds the process).
 */
export async function runShutdownLadder(steps: readonly Stoppable[], graceMs: number, clock: Clock, log: Logger): Promise<void> {
  const by = Deadline.within(clock, graceMs);
  for (const step of ladderOrder(steps)) {
    const stepBy = step.minMs ? by.atLeast(step.minMs) : by;
    const limitMs = stepBy.leftMs();
    const began = clock.now();
    let timer: TimerHandle | null = null;
    const progress = () => {
      timer = clock.setTimeout(() => {
        const waitedMs = clock.now() - began;
        const fields = { step: step.name, waited_ms: waitedMs, limit_ms: limitMs };
        if (waitedMs > limitMs) log.error(fields, `shutdown: ${step.name} is still running past its limit; the ladder waits for it`);
        else log.info(fields, `shutdown: still stopping ${step.name}`);
        progress();
      }, SHUTDOWN_PROGRESS_EVERY_MS);
    };
    progress();
    try {
      const warning = await step.stop(stepBy);
      if (warning) log.warn({ step: step.name }, `shutdown: ${warning}`);
    } catch (err) {
      log.error({ step: step.name, err: (err as Error).message }, `shutdown: ${step.name} failed; continuing with the next step`);
    } finally {
      if (timer) clock.clearTimeout(timer);
    }
  }
}

/** What takes requests in: stops taking new ones right after readiness goes false; what is still open is closed at the end of the grace. */
export interface Ingress {
  stopAccepting(): void;
  /** Waits until `by` for requests in flight, then closes every connection left; a string is a warning. */
  close(by: Deadline): Promise<string | void>;
}

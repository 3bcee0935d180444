import type { Clock } from '../time/clock.js';
import type { Logger } from '../telemetry/logger.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { LockHandle } from '../coordination/leader-lock.js';
import type { Claim, SlotClaims } from '../coordination/slot-claim.js';
import { LeaseKeeper } from '../coordination/lease-keeper.js';
import type { JobDefinition, RoundAborted } from './job.js';

/** How long past its timeout a round may take to stop on its signal before its held lease is warned about. */
const OVERRUN_GRACE_MS = 1000;

/**
 * The keeper of one cluster round's lease (and leader lock): renews both, aborts the round when
 * the lease is lost, and warns once when the lease is still renewed past the job's timeout. Null
 * for a round without a lease (instance rounds).
 */
export function roundLeaseKeeper(o: {
  clock: Clock;
  leaseMs: number | null;
  job: JobDefinition;
  claims: SlotClaims;
  claim: Claim;
  handle: LockHandle | null;
  log: Logger;
  metrics: Metrics;
  instanceId: string;
  /** When the round started (the clock's time). */
  startedAt: number;
  abort: (why: RoundAborted['why'], message: string) => void;
}): LeaseKeeper | null {
  const { clock, leaseMs, job, claims, claim, handle, log, metrics } = o;
  if (leaseMs === null) return null;
  let overrunWarned = false;
  return new LeaseKeeper({
    clock,
    leaseMs,
    renewLease: async () => {
      const renewed = await claims.renew(claim, leaseMs);
      // The seed's daily check "is a leader lock held too long": the lease (and lock) renewed
      // past the job's timeout (its expected duration; lock_ttl is only the renewal horizon)
      // means the round ignores its AbortSignal. Warned once per round, not once per renewal;
      // a round that stops on its signal is gone well within the grace.
      const age = clock.now() - o.startedAt;
      if (renewed && !overrunWarned && age > job.settings.timeoutMs + OVERRUN_GRACE_MS) {
        overrunWarned = true;
        log.warn(
          { holder: o.instanceId, age_ms: age, timeout_ms: job.settings.timeoutMs, lock_backend: handle?.backend ?? null },
          'lease held past the job timeout: the round ignores its AbortSignal',
        );
      }
      return renewed;
    },
    renewLock: handle ? () => handle.renew(leaseMs) : undefined,
    onLost: (reason) => {
      metrics.leaseLost.inc({ job: job.name });
      log.error({ reason }, 'lease lost: aborting round');
      o.abort('lease_lost', `lease lost: ${reason}`);
    },
    onLockRenewFailed: (reason) => {
      metrics.lockRenewFailures.inc({ job: job.name });
      log.warn({ reason, backend: handle?.backend }, 'leader lock renewal failed; the PostgreSQL lease still guards the round');
    },
  });
}

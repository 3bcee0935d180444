import { wired, type WiringContext } from '../../modules/wiring.js';
import type { AccountsFace } from '../accounts/index.js';
import { Monitors } from './store/monitors.js';
import { MonitorHistory } from './store/monitor-history.js';
import { AccountTests } from './store/account-tests.js';
import { ProbeDue } from './store/probe-due.js';
import { ProbeClient } from '../../upstream/probe-client.js';
import { MonitorRunner } from './monitor-runner.js';
import { AccountTestRunner } from './account-test-runner.js';

/** Channel monitors and scheduled account tests: stores, the probe client, and the two per-replica runners. */
export function buildProbes(w: WiringContext, { tester }: Pick<AccountsFace, 'accounts' | 'tokens' | 'tester'>) {
  const { config, db, clock, log, metrics, box, random } = w;
  const c = config.channel_monitor;
  const t = config.scheduled_account_test;
  const monitors = new Monitors(db, box);
  const accountTests = new AccountTests(db);
  const client = new ProbeClient(undefined, c.pool_size);
  const instanceId = config.instance.id;
  const nextDue = new ProbeDue(db);
  const services = {
    monitors,
    monitorHistory: new MonitorHistory(db),
    accountTests,
    probeRandom: random,
    monitorRunner: new MonitorRunner(monitors, client, tester, clock, metrics, log.child({ area: 'channel_monitor' }), {
      instanceId,
      poolSize: c.pool_size,
      claimBatch: c.claim_batch,
      pollMs: c.poll_interval,
      leaseGraceMs: c.lease_grace,
      lateAfterMs: c.late_after,
      degradedAfterMs: c.degraded_after,
      minIntervalMs: c.min_interval,
      aliveKey: () => w.liveness?.key ?? null,
      wakes: w.wakes,
      nextDueMs: () => nextDue.monitorsInMs(),
      ticks: metrics.loopTicks,
    }),
    accountTestRunner: new AccountTestRunner(accountTests, tester, clock, metrics, log.child({ area: 'scheduled_account_test' }), {
      instanceId,
      concurrency: t.concurrency,
      pollMs: t.poll_interval,
      timeoutMs: t.timeout,
      leaseGraceMs: c.lease_grace,
      minIntervalMs: c.min_interval,
      aliveKey: () => w.liveness?.key ?? null,
      wakes: w.wakes,
      nextDueMs: () => nextDue.accountTestsInMs(),
      ticks: metrics.loopTicks,
    }),
  };
  w.wakes?.on('monitors', (why) => services.monitorRunner.wake(why));
  w.wakes?.on('account_tests', (why) => services.accountTestRunner.wake(why));
  // The runners stop in their jobs' onStop; the client's connection pools close after them.
  return wired({ services, rungs: [{ name: 'probe client', stop: () => client.close() }] });
}

/** What the probes area's jobs and routes use (its routes also read accounts: `AccountsFace`). */
export type ProbeServices = ReturnType<typeof buildProbes>['services'];

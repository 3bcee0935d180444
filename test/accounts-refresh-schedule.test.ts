import { refreshSettings } from './helpers/refresh-settings.js';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type pg from 'pg';
import type { Runtime } from '../src/app/runtime.js';
import type { ManualClock } from '../src/time/clock.js';
import type { FakeOAuthServer } from './fixtures/oauth-server.js';
import { accountsRuntime, expectNoTokenLogged, type AccountsRuntime } from './helpers/accounts-runtime.js';
import { Deadline } from '../src/time/deadline.js';

const MARGIN_S = 300;

/**
 * When token refreshes run, on real PostgreSQL and Redis against a real OAuth server on loopback
 * (test/helpers/accounts-runtime.ts): the retry backoff and recovery attempts, the schedule at
 * expiry − margin with its jitter, short-lived tokens, timers firing, and what a restarted
 * replica plans. The clock is manual and the jitter source `random` is set per test, so due times
 * are exact. What one refresh does is in accounts-refresh.test.ts.
 */
describe('when token refreshes run (real PostgreSQL, Redis, OAuth server)', () => {
  let random = 0.5;
  const { started, createAccount, get } = accountsRuntime(() => random);
  let sql: pg.Client;
  let oauth: FakeOAuthServer;
  let rt: Runtime;
  let clock: ManualClock;
  let logs: AccountsRuntime['logs'];
  beforeAll(() => {
    ({ sql, oauth, rt, clock, logs } = started());
  });
  afterEach(() => {
    random = 0.5;
  });

  /** A second scheduler on the same store and refresher: what a restarted replica plans, on the test's clock. */
  async function restartedScheduler() {
    const { TokenRefreshService } = await import('../src/areas/accounts/token-refresh-service.js');
    return new TokenRefreshService(
      rt.services.accounts,
      rt.services.tokenRefresh.refresher,
      refreshSettings({ marginMs: MARGIN_S * 1000, shardsWaitMs: 0 }),
      clock,
      () => 0.5,
      logs.logger,
      rt.metrics,
    );
  }

  it('after the last attempt, a recovery attempt in 10 min ±20%; success clears the failures', async () => {
    const svc = rt.services.tokenRefresh;
    const a = await createAccount('flaky');
    oauth.fail('500', 5, (rt) => rt === a.creds.refresh_token);
    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      const out = await svc.refreshNow(a.id, 'retry', a.token_version);
      expect(out.result, JSON.stringify(out)).toBe('transient');
      delays.push(svc.queue.get(a.id)!.at - clock.now());
    }
    expect(delays).toEqual([5000, 15_000, 45_000, 135_000, 600_000]);
    expect(svc.queue.get(a.id)!.kind).toBe('recovery');
    random = 0;
    oauth.fail('500', 1, (rt) => rt === a.creds.refresh_token);
    await svc.refreshNow(a.id, 'admin', a.token_version);
    expect(svc.queue.get(a.id)!.at - clock.now()).toBe(480_000);
    // A recovery attempt right after any replica's attempt is skipped and put off, not dropped.
    const skipped = await svc.refreshNow(a.id, 'recovery', a.token_version);
    expect(skipped).toMatchObject({ result: 'skipped', reason: 'recently_attempted' });
    expect(svc.queue.get(a.id)).toMatchObject({ kind: 'recovery' });
    random = 0.999999;
    oauth.fail('500', 1, (rt) => rt === a.creds.refresh_token);
    await svc.refreshNow(a.id, 'admin', a.token_version);
    expect(svc.queue.get(a.id)!.at - clock.now()).toBe(720_000);
    const ok = await svc.refreshNow(a.id, 'admin', a.token_version);
    expect(ok.result).toBe('refreshed');
    expect((await get(a.id)).refresh).toMatchObject({ consecutive_failures: 0, last_error: null });
    expect(svc.queue.get(a.id)!.kind).toBe('refresh');
  });

  it('schedules at expiry − margin, jittered 80–100% (never into the margin), and picks up new accounts on sync', async () => {
    const svc = rt.services.tokenRefresh;
    const a = await createAccount('sched-1h', {}, 3600);
    const b = await createAccount('sched-10m', {}, 600);
    const c = await createAccount('sched-2m', {}, 120);
    const atFor = async (r: number, id: number) => {
      random = r;
      svc.queue.cancel(id);
      await rt.services.accounts.update(id, { name: `touched-${r}-${id}` });
      await svc.sync();
      return svc.queue.get(id)!.at - clock.now();
    };
    const exp = (x: { token_expires_at: unknown }) => Date.parse(String(x.token_expires_at)) - clock.now();
    const delayA = exp(a) - MARGIN_S * 1000;
    expect(await atFor(0, a.id)).toBeCloseTo(0.8 * delayA, -2);
    expect(await atFor(0.5, a.id)).toBeCloseTo(0.9 * delayA, -2);
    // The jitter only moves a refresh earlier: the whole margin is left for retries.
    expect(await atFor(0.999, a.id)).toBeLessThanOrEqual(delayA);
    expect(await atFor(0.999, a.id)).toBeCloseTo(0.9998 * delayA, -2);
    // 10-minute token: due in 5 min, jitter bounds.
    const delayB = exp(b) - MARGIN_S * 1000;
    expect(await atFor(0, b.id)).toBeCloseTo(0.8 * delayB, -2);
    // A token already inside its margin that this runtime never refreshed (imported, restored) is due now.
    expect(await atFor(0.5, c.id)).toBe(0);
    // Sync without changes keeps the timers as they are (no re-jitter).
    const before = svc.queue.get(a.id)!.at;
    random = 0;
    await svc.sync();
    expect(svc.queue.get(a.id)!.at).toBe(before);
  });

  it('a short-lived token is refreshed halfway through its life, and a replica planning it later (a restart) finds that same time', async () => {
    const lifetimeOf = oauth.opts.lifetimeOf;
    oauth.opts.lifetimeOf = (subject) => (subject === 'short-lived' ? 120 : lifetimeOf(subject));
    const restarted = await restartedScheduler();
    try {
      const a = await createAccount('short-lived');
      const svc = rt.services.tokenRefresh;
      expect((await svc.refreshNow(a.id, 'admin', a.token_version)).result).toBe('refreshed');
      const obtained = clock.now();
      // 120 s of life against a 300 s margin: halfway, not now (that would loop).
      expect(svc.queue.get(a.id)).toMatchObject({ kind: 'refresh', at: obtained + 60_000 });
      svc.queue.cancel(a.id); // this test drives the clock past the halfway point: only the plans are compared
      await clock.advance(40_000);
      await restarted.sync();
      // The same halfway point, not half of the 80 s left at this look (which kept moving a restarted replica's refreshes later).
      expect(restarted.queue.get(a.id)).toMatchObject({ kind: 'refresh', at: obtained + 60_000 });
      restarted.queue.cancel(a.id);
      await clock.advance(30_000);
      const again = await restartedScheduler();
      try {
        await again.sync();
        expect(again.queue.get(a.id)!.at).toBe(clock.now()); // past the halfway point: now
      } finally {
        void again.queue.stop(Deadline.within(clock, 0));
      }
    } finally {
      oauth.opts.lifetimeOf = lifetimeOf;
      void restarted.queue.stop(Deadline.within(clock, 0)); // not stop(): the refresher is shared with the runtime
    }
  });

  it('timers fire: the scheduler refreshes a due account on the manual clock and arms the next refresh', async () => {
    const svc = rt.services.tokenRefresh;
    const a = await createAccount('fires', {}, 400);
    await svc.sync();
    const entry = svc.queue.get(a.id)!;
    expect(entry.kind).toBe('refresh');
    // Other tests' accounts may fall due on the way; only this account's calls count.
    const calls = () => oauth.requests.filter((r) => r.refresh_token === a.creds.refresh_token).length;
    await clock.advance(entry.at - clock.now() - 1);
    // The manual clock fires due timers inside advance(): a timer fired early would have taken the entry off the queue.
    expect(svc.queue.get(a.id)).toBe(entry);
    expect(svc.refresher.isInFlight(a.id)).toBe(false);
    expect(calls()).toBe(0);
    await clock.advance(1);
    // The stored rotation, the re-armed timer and its log line land one after the other: wait for each, not just the first.
    await vi.waitFor(async () => expect((await get(a.id)).token_version).toBe(2), { timeout: 30_000 });
    await vi.waitFor(() => expect(svc.queue.get(a.id)).toMatchObject({ kind: 'refresh', version: 2 }), { timeout: 30_000 });
    await vi.waitFor(() => expect(logs.lines.some((l) => l.msg === 'Next refresh scheduled' && l.account_id === a.id && typeof l.delay_secs === 'number')).toBe(true), { timeout: 30_000 });
  });

  it('crash recovery: accounts left refreshing, and expired ones with a refresh token, get a staggered recovery attempt at start', async () => {
    const a = await createAccount('left-refreshing');
    const b = await createAccount('left-expired');
    await sql.query(`UPDATE accounts SET status = 'refreshing', status_before_refresh = 'active' WHERE id = $1`, [a.id]);
    await sql.query(`UPDATE accounts SET status = 'expired' WHERE id = $1`, [b.id]);
    // A restart keeps the backoff: the failure count and last attempt are on the account.
    const c = await createAccount('failing-before-restart');
    const d = await createAccount('exhausted-before-restart');
    const lastAttempt = new Date(clock.now());
    await sql.query(`UPDATE accounts SET refresh_failures = 2, last_refresh_attempt_at = $2 WHERE id = $1`, [c.id, lastAttempt]);
    await sql.query(`UPDATE accounts SET refresh_failures = 5, last_refresh_attempt_at = $2 WHERE id = $1`, [d.id, lastAttempt]);
    const fresh = await restartedScheduler();
    try {
      await fresh.sync();
      // Left refreshing with no lease behind it: a dead process's, taken over at once (issue 29).
      expect(fresh.queue.get(a.id)).toMatchObject({ kind: 'takeover' });
      expect(fresh.queue.get(b.id)).toMatchObject({ kind: 'recovery' });
      expect(fresh.queue.get(b.id)!.at - clock.now()).toBeGreaterThanOrEqual(30_000 * 0.8);
      expect(fresh.queue.get(c.id)).toMatchObject({ kind: 'retry', at: lastAttempt.getTime() + 15_000 });
      expect(fresh.queue.get(d.id)).toMatchObject({ kind: 'recovery', at: lastAttempt.getTime() + 600_000 });
      const out = await fresh.refreshNow(b.id, 'recovery', b.token_version);
      expect(out.result).toBe('refreshed');
      expect((await get(b.id)).status).toBe('active');
      // A second recovery right after an attempt (another replica's, say) is skipped.
      await sql.query(`UPDATE accounts SET status = 'expired' WHERE id = $1`, [b.id]);
      const again = await fresh.refreshNow(b.id, 'recovery', (await get(b.id)).token_version);
      expect(again).toMatchObject({ result: 'skipped', reason: 'recently_attempted' });
    } finally {
      void fresh.queue.stop(Deadline.within(clock, 0)); // not fresh.stop(): the refresher is shared with the runtime
    }
  });

  it('never logs a token', () => expectNoTokenLogged(logs.text()));
});

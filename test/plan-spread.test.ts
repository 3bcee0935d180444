import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { SecretBox } from '../src/store/secret-box.js';
import { Accounts } from '../src/areas/accounts/store/accounts.js';
import { AccountTests, type PlanInput } from '../src/areas/probes/store/account-tests.js';
import { LIVENESS_NS, LivenessSession } from '../src/coordination/liveness.js';
import { PLAN_SPREAD_MAX_MS, latestPlanSlot, nextPlanSlot, placeClaim } from '../src/areas/probes/plan-schedule.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { TEST_MASTER_KEY, freshDatabase } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { Deadline } from '../src/time/deadline.js';
import { systemClock } from '../src/time/clock.js';

/**
 * Issue 24 for scheduled account tests, as monitors got it (test/probe-spread.test.ts): a plan's
 * slots are its cron firings moved by a stable hash of its id over the interval; a create or edit
 * is tested at once, then from its first slot at least half an interval later; a slot claimed
 * more than half an interval late is skipped and counted; a dead claimer's plan is free at once.
 */
const CRON = '*/3 * * * * *'; // every 3 s
const I = 3000;
const T0 = Date.parse('2026-03-01T10:00:00.000Z');

/** These plans' accounts are not under test here: the result changes nothing on them. */
const noEffect = async () => ({ status_before: null, status_after: null, temp_unschedulable_until: null, temp_unschedulable_reason: null, recovered: false, note: 'not under test' });

describe('account-test plan phase slots', () => {
  it('200 plans of one cron fire at 200 distinct, evenly spaced instants of each interval, not at the firing', () => {
    const slots = Array.from({ length: 200 }, (_, i) => nextPlanSlot(i + 1, CRON, 'UTC', T0)!.slotMs).sort((a, b) => a - b);
    expect(new Set(slots).size).toBe(200);
    expect(slots[0]).toBeGreaterThanOrEqual(T0);
    expect(slots[199]).toBeLessThan(T0 + I);
    const gaps = slots.slice(1).map((s, i) => s - slots[i]!);
    // Fibonacci hashing of consecutive ids: every gap is within a small factor of the mean (15 ms).
    expect(Math.max(...gaps)).toBeLessThanOrEqual(3 * (I / 200));
  });

  it('a daily plan runs within five minutes of its hour, not anywhere in its day', () => {
    const day = Array.from({ length: 500 }, (_, i) => nextPlanSlot(i + 1, '0 3 * * *', 'UTC', T0)!.slotMs);
    const at3 = Date.parse('2026-03-02T03:00:00.000Z');
    for (const s of day) expect(s - at3).toBeGreaterThanOrEqual(0);
    for (const s of day) expect(s - at3).toBeLessThan(PLAN_SPREAD_MAX_MS);
    expect(new Set(day).size).toBeGreaterThan(450);
  });

  it("a plan's slots are stable and one per interval, whenever they are asked for", () => {
    const first = nextPlanSlot(42, CRON, 'UTC', T0)!.slotMs;
    for (let k = 1; k < 20; k++) {
      expect(nextPlanSlot(42, CRON, 'UTC', T0 + k * I)!.slotMs).toBe(first + k * I);
      expect(latestPlanSlot(42, CRON, 'UTC', first + k * I + 1)!.slotMs).toBe(first + k * I);
    }
    expect(nextPlanSlot(42, CRON, 'UTC', first + 1)!.slotMs).toBe(first + I);
  });

  it('a claim runs the latest slot at most half an interval late, skips a later one, and counts the slots passed', () => {
    const due = nextPlanSlot(7, CRON, 'UTC', T0)!.slotMs;
    const base = { id: 7, cron: CRON, timezone: 'UTC', dueMs: due, dueNow: false };
    expect(placeClaim({ ...base, claimedAtMs: due + 10 })).toEqual({ run: true, slotMs: due, missed: 0 });
    expect(placeClaim({ ...base, claimedAtMs: due + I / 2 })).toEqual({ run: true, slotMs: due, missed: 0 });
    expect(placeClaim({ ...base, claimedAtMs: due + I / 2 + 1 })).toEqual({ run: false, missed: 1, nextMs: due + I });
    // Four intervals later, 0.2 of an interval into the fifth slot: four slots missed, the fifth tested.
    expect(placeClaim({ ...base, claimedAtMs: due + 4 * I + 600 })).toEqual({ run: true, slotMs: due + 4 * I, missed: 4 });
    // The immediate test of a create or edit runs however late it is claimed.
    expect(placeClaim({ ...base, dueNow: true, claimedAtMs: due + 10 * I })).toEqual({ run: true, slotMs: due, missed: 0 });
  });
});

describe('account-test plans on PostgreSQL', () => {
  let db: PgDb;
  let drop: () => Promise<void>;
  let plans: AccountTests;
  let accountId: number;
  const input = (): PlanInput => ({ accountId, cron: CRON, timezone: 'UTC', model: 'm', maxResults: 5, autoRecover: false, enabled: true });
  beforeAll(async () => {
    const fresh = await freshDatabase({ migrated: true });
    drop = fresh.drop;
    db = await PgDb.connect({ url: fresh.url, poolSize: 4, connectTimeoutMs: 5000 });
    await migrate(db);
    plans = new AccountTests(db);
    const accounts = new Accounts(db, SecretBox.fromBase64(TEST_MASTER_KEY));
    accountId = (await accounts.create({ platform: 'openai', name: 'spread', credentials: { access_token: 't' }, tokenExpiresAt: null })).id;
  });
  afterAll(async () => {
    await db.close();
    await drop();
  });

  it('a created or edited plan is due at once, as its immediate test; the write that ends it clears that', async () => {
    const view = await plans.create(input());
    const [c] = await plans.claim('r1', 10, 10, 60_000);
    expect(c).toMatchObject({ id: view.id, dueNow: true });
    const next = new Date(c!.claimedAt.getTime() + 60_000);
    expect(await plans.finish(c!, 'r1', { startedAt: c!.claimedAt, ok: true, status: 200, latencyMs: 1, ttfbMs: 1, errorClass: null, detail: null, resetAtMs: null }, next, 0, noEffect)).toMatchObject(
      { effect: { recovered: false } },
    );
    expect((await plans.get(view.id))!.next_run_at).toBe(next.toISOString());
    await plans.update(view.id, { model: 'm2' }, true);
    const [e] = await plans.claim('r1', 10, 10, 60_000);
    expect(e).toMatchObject({ id: view.id, dueNow: true });
    // A late slot skipped under the fence: counted, and the plan moved on.
    expect(await plans.skip(e!, 3, next)).toBe(true);
    expect((await plans.get(view.id))!).toMatchObject({ missed: 3 });
    expect(await plans.skip(e!, 3, next)).toBe(false); // released already: the same fence writes nothing more
    expect((await plans.get(view.id))!).toMatchObject({ missed: 3 });
    await plans.update(view.id, { enabled: false }, false);
  });

  it("a plan leased by a dead replica is claimable at once, and the dead claimer's fence writes nothing", async () => {
    const view = await plans.create(input());
    const live = new LivenessSession(db, silentLogger(), 100);
    await live.start();
    const key = live.key!;
    const [a] = await plans.claim('r1', 10, 10, 3_600_000, key);
    expect(a).toMatchObject({ id: view.id });
    expect(await plans.claim('r2', 10, 10, 60_000)).toEqual([]); // alive: its hour-long lease holds
    // A crash: the liveness session's backend is killed, so the server frees its lock.
    await db.query(`SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::int::oid AND objid = $2::int::oid`, [LIVENESS_NS, key]);
    await live.stop(Deadline.within(systemClock, 1000));
    const b = await waitFor(
      async () => {
        const got = await plans.claim('r2', 10, 10, 60_000);
        return got.length ? got : null;
      },
      { what: "r2's claim of the crashed holder's plan", intervalMs: 25, timeoutMs: 5000 },
    );
    expect(b).toHaveLength(1);
    expect(b[0]).toMatchObject({ id: view.id, fence: a!.fence + 1, occurrence: a!.occurrence, dueNow: true });
    const out = { startedAt: new Date(), ok: true, status: 200, latencyMs: 1, ttfbMs: 1, errorClass: null, detail: null, resetAtMs: null };
    expect(await plans.finish(a!, 'r1', out, new Date(Date.now() + 60_000), 0, noEffect)).toBeNull();
    expect(await plans.skip(a!, 1, new Date(Date.now() + 60_000))).toBe(false);
    expect(await plans.finish(b[0]!, 'r2', out, new Date(Date.now() + 60_000), 0, noEffect)).toMatchObject({ effect: { recovered: false } });
  });
});

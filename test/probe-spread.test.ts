import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { SecretBox } from '../src/store/secret-box.js';
import { Monitors, spreadPhase, type MonitorInput } from '../src/areas/probes/store/monitors.js';
import { LivenessSession } from '../src/coordination/liveness.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { ManualClock, systemClock } from '../src/time/clock.js';
import { TEST_MASTER_KEY, freshDatabase } from './helpers/services.js';
import { Deadline } from '../src/time/deadline.js';

/**
 * Issue 24, "Spread, not herds": monitors fire on `phase(id) + k × interval`, whatever their
 * creation time; a slot claimed more than half an interval late is skipped and counted; a
 * create or edit is probed at once, then from the first slot at least half an interval later;
 * a dead replica's leases are free at once. Claims run on real PostgreSQL with the injected clock.
 */
const I = 3000;
const input = (name: string, over: Partial<MonitorInput> = {}): MonitorInput => ({
  name,
  baseUrl: 'http://127.0.0.1:9',
  model: 'm',
  apiKey: 'k',
  accountId: null,
  intervalMs: I,
  timeoutMs: 1000,
  jitterMs: 0,
  enabled: true,
  labels: {},
  ...over,
});

describe('monitor spread on PostgreSQL', () => {
  let db: PgDb;
  let drop: () => Promise<void>;
  let monitors: Monitors;
  beforeAll(async () => {
    const fresh = await freshDatabase({ migrated: true });
    drop = fresh.drop;
    db = await PgDb.connect({ url: fresh.url, poolSize: 4, connectTimeoutMs: 5000 });
    await migrate(db);
    monitors = new Monitors(db, SecretBox.fromBase64(TEST_MASTER_KEY));
  });
  afterAll(async () => {
    await db.close();
    await drop();
  });

  it('200 monitors of 3 s created in the same 0.4 s fire at 200 distinct, evenly spaced instants; none is probed twice within half an interval', async () => {
    const clock = new ManualClock(Date.parse('2026-03-01T10:00:00.000Z'));
    const ids: number[] = [];
    for (let i = 0; i < 200; i++) {
      ids.push((await monitors.create(input(`spread-${i}`), new Date(clock.now()))).id);
      await clock.advance(2); // 200 creates within 0.4 s
    }
    const probes = new Map<number, number[]>(ids.map((id) => [id, []]));
    const slots = new Map<number, number[]>(ids.map((id) => [id, []]));
    // Replicas claiming every 10 ms for four intervals; one pass is made 0.4 interval late on purpose (a loaded replica).
    const end = clock.now() + 4 * I;
    let skipped = 0;
    let lateDone = false;
    while (clock.now() < end) {
      const { claimed, skipped: s } = await monitors.claim('r1', 1000, 100, null, new Date(clock.now()));
      skipped += s;
      for (const m of claimed) {
        if (!probes.has(m.id)) continue;
        probes.get(m.id)!.push(m.claimedAt.getTime());
        slots.get(m.id)!.push(m.scheduledFor.getTime());
      }
      const step = !lateDone && clock.now() > end - 2 * I ? 0.4 * I : 10;
      if (step > 10) lateDone = true;
      await clock.advance(step);
    }
    // The first probe is the immediate one (within the creating 0.4 s + one poll).
    for (const id of ids) expect(probes.get(id)![0]! - Date.parse('2026-03-01T10:00:00.000Z')).toBeLessThan(450);
    // Steady state: one slot per monitor per interval, on its phase; phases are 200 distinct, evenly spaced instants.
    const phases = ids.map((id) => spreadPhase(id, I)).sort((a, b) => a - b);
    expect(new Set(phases).size).toBe(200);
    const gaps = phases.map((p, i) => (i === 0 ? p + I - phases[199]! : p - phases[i - 1]!));
    const mean = I / 200;
    expect(Math.max(...gaps)).toBeLessThanOrEqual(2 * mean);
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(mean / 2);
    for (const id of ids) for (const s of slots.get(id)!.slice(1)) expect(((s % I) + I) % I).toBe(spreadPhase(id, I));
    // Never two probes of one monitor within half an interval, the late pass included.
    let closest = Infinity;
    for (const id of ids) {
      const t = probes.get(id)!;
      for (let i = 1; i < t.length; i++) closest = Math.min(closest, t[i]! - t[i - 1]!);
    }
    expect(closest).toBeGreaterThanOrEqual(I / 2);
    expect(skipped).toBeGreaterThanOrEqual(0);
  });

  it('a slot claimed more than half an interval late is skipped and counted as missed, never probed close to the next', async () => {
    const clock = new ManualClock(Date.parse('2026-03-02T10:00:00.000Z'));
    await db.query('UPDATE monitors SET enabled = false'); // the skip count below is this monitor's alone
    const { id } = await monitors.create(input('late'), new Date(clock.now()));
    const claim = () => monitors.claim('r1', 1000, 100, null, new Date(clock.now()));
    const first = (await claim()).claimed.find((m) => m.id === id)!;
    expect(first.missed).toBe(0);
    // The next slot is the first phase slot at least half an interval after the immediate probe.
    const next = (await monitors.get(id))!.next_due_at;
    expect(Date.parse(next) - clock.now()).toBeGreaterThanOrEqual(I / 2);
    expect(Date.parse(next) % I).toBe(spreadPhase(id, I));
    // Claimed 0.6 interval after that slot: skipped, counted, not probed; the following slot is on time.
    await clock.advance(Date.parse(next) - clock.now() + 0.6 * I);
    const late = await claim();
    expect(late.claimed.find((m) => m.id === id)).toBeUndefined();
    expect(late.skipped).toBe(1);
    expect(Date.parse((await monitors.get(id))!.next_due_at)).toBe(Date.parse(next) + I);
    // Claimed 0.4 interval late: probed (within half an interval), and the next slot keeps its phase.
    await clock.advance(0.8 * I);
    const ok = (await claim()).claimed.find((m) => m.id === id)!;
    expect(ok.scheduledFor.getTime()).toBe(Date.parse(next) + I);
    expect(Date.parse((await monitors.get(id))!.next_due_at)).toBe(Date.parse(next) + 2 * I);
  });

  it('an edit to what is probed is probed at once; a rename is not', async () => {
    const clock = new ManualClock(Date.parse('2026-03-03T10:00:00.000Z'));
    const { id } = await monitors.create(input('edit'), new Date(clock.now()));
    const claim = () => monitors.claim('r1', 1000, 100, null, new Date(clock.now()));
    await claim();
    await clock.advance(1200); // lease (1.1 s) over, next slot not yet due
    await monitors.update(id, { name: 'renamed' }, false);
    expect((await claim()).claimed.find((m) => m.id === id)).toBeUndefined();
    await monitors.update(id, { model: 'other' }, true, new Date(clock.now()));
    const now = (await claim()).claimed.find((m) => m.id === id)!;
    expect(now.scheduledFor.getTime()).toBe(clock.now());
    expect(Date.parse((await monitors.get(id))!.next_due_at) - clock.now()).toBeGreaterThanOrEqual(I / 2);
  });

  it('a monitor leased by a replica whose liveness session ended is claimable at once, not after its lease', async () => {
    const clock = new ManualClock(Date.parse('2026-03-04T10:00:00.000Z'));
    const { id } = await monitors.create(input('dead', { timeoutMs: 2000 }), new Date(clock.now()));
    const r1 = new LivenessSession(db, silentLogger(), 100);
    const r2 = new LivenessSession(db, silentLogger(), 100);
    await r1.start();
    await r2.start();
    try {
      // r1 claims with a lease far past the next slot (timeout 2 s + grace 10 s).
      const mine = await monitors.claim('r1', 1000, 10_000, r1.key, new Date(clock.now()));
      expect(mine.claimed.map((m) => m.id)).toContain(id);
      const slot = Date.parse((await monitors.get(id))!.next_due_at);
      await clock.advance(slot - clock.now());
      // Alive holder: its lease holds.
      expect((await monitors.claim('r2', 1000, 100, r2.key, new Date(clock.now()))).claimed.map((m) => m.id)).not.toContain(id);
      await r1.stop(Deadline.within(systemClock, 1000)); // the process "dies": its session, and the lock with it, is gone
      const taken = await monitors.claim('r2', 1000, 100, r2.key, new Date(clock.now()));
      expect(taken.claimed.map((m) => m.id)).toContain(id);
      expect(taken.claimed.find((m) => m.id === id)!.scheduledFor.getTime()).toBe(slot);
    } finally {
      await r1.stop(Deadline.within(systemClock, 1000));
      await r2.stop(Deadline.within(systemClock, 1000));
    }
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import type { Db } from '../src/store/db.js';
import { migrate } from '../src/app/migrations.js';
import { MIGRATIONS } from '../src/app/migrations.js';
import { applyMigrations, collectMigrations } from '../src/store/migrate.js';
import { KERNEL_MIGRATIONS } from '../src/store/migrations/index.js';
import { AREAS } from '../src/app/registry.js';
import { SlotClaims } from '../src/coordination/slot-claim.js';
import { FencedCursors, FencedWriteRefused } from '../src/coordination/fenced-cursor.js';
import { CanaryRuns } from '../src/areas/canary/store/canary-runs.js';
import { InstanceRegistry } from '../src/coordination/instance-registry.js';
import { AdminSessions } from '../src/areas/admin/store/admin-sessions.js';
import { RunRecords } from '../src/coordination/run-records.js';
import { systemClock } from '../src/time/clock.js';
import { UserError } from '../src/config/errors.js';
import { BACKENDS } from './helpers/backends.js';
import { waitFor } from './helpers/wait.js';

const SLOT = (n: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, n));
const claimArgs = (job: string, slot: Date, leaseMs = 5000) => ({ job, slot, leaseMs, timeoutMs: 1000, backend: 'memory' as const, toleratedFutureMs: 500 });

describe.each(BACKENDS)('store on $name', (backend) => {
  let db: Db;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    ({ db, cleanup } = await backend.open());
  });
  /** Until `job`'s lease has run out by the database clock (what a takeover is judged by). */
  const leaseExpired = (job: string) =>
    waitFor(async () => (await db.query(`SELECT lease_until <= clock_timestamp() AS expired FROM job_state WHERE job_name = $1`, [job])).rows[0]?.expired === true, {
      what: `${job}'s lease expired`,
    });
  afterAll(async () => cleanup());

  it('migrations are idempotent', async () => {
    expect(await migrate(db)).toEqual([]);
  });

  it('claims a slot once; a repeat or an older slot is refused with the reason', async () => {
    const a = new SlotClaims(db, 'a');
    const b = new SlotClaims(db, 'b');
    await a.ensureJobs(['j1']);
    const first = await a.claimScheduled(claimArgs('j1', SLOT(10)));
    expect(first.claimed).toBe(true);
    if (!first.claimed) return;
    expect(await a.complete(first.claim, { status: 'ok', items: 1 })).toBe(true);
    const again = await b.claimScheduled(claimArgs('j1', SLOT(10)));
    expect(again).toEqual({ claimed: false, reason: expect.stringMatching(/already claimed/) });
    const older = await b.claimScheduled(claimArgs('j1', SLOT(5)));
    expect(older).toEqual({ claimed: false, reason: expect.stringMatching(/already claimed/) });
    const next = await b.claimScheduled(claimArgs('j1', SLOT(11)));
    expect(next.claimed && next.claim.token).toBeGreaterThan(first.claim.token);
  });

  it('many replicas racing for one slot: exactly one wins', async () => {
    const claimers = Array.from({ length: 20 }, (_, i) => new SlotClaims(db, `r${i}`));
    await claimers[0]!.ensureJobs(['race']);
    const results = await Promise.all(claimers.map((c) => c.claimScheduled(claimArgs('race', SLOT(1)))));
    expect(results.filter((r) => r.claimed)).toHaveLength(1);
    const { rows } = await db.query(`SELECT count(*)::int AS n FROM job_runs WHERE job_name = 'race' AND fencing_token IS NOT NULL`);
    expect(Number(rows[0]!.n)).toBe(1);
  });

  it('a held lease blocks the next slot (no overlap); completing frees it', async () => {
    const a = new SlotClaims(db, 'a');
    const b = new SlotClaims(db, 'b');
    await a.ensureJobs(['lease']);
    const r1 = await a.claimScheduled(claimArgs('lease', SLOT(1)));
    if (!r1.claimed) throw new Error('expected claim');
    expect(await b.claimScheduled(claimArgs('lease', SLOT(2)))).toEqual({ claimed: false, reason: expect.stringMatching(/lease held by a/) });
    expect(await b.claimManual({ job: 'lease', leaseMs: 5000, timeoutMs: 1000, backend: 'memory' })).toEqual({ claimed: false, reason: expect.stringMatching(/lease held by a/) });
    expect(await a.renew(r1.claim, 5000)).toBe(true);
    await a.complete(r1.claim, { status: 'no_work', items: 0 });
    expect((await b.claimScheduled(claimArgs('lease', SLOT(2)))).claimed).toBe(true);
  });

  it('an expired lease is taken over: the old round is marked abandoned, its renewals and fenced writes refused', async () => {
    const a = new SlotClaims(db, 'dead');
    const b = new SlotClaims(db, 'alive');
    const cursors = new FencedCursors(db);
    await a.ensureJobs(['takeover']);
    const r1 = await a.claimScheduled(claimArgs('takeover', SLOT(1), 150));
    if (!r1.claimed) throw new Error('expected claim');
    await cursors.write('takeover', 'watermark', { at: 1 }, r1.claim.token);
    await leaseExpired('takeover');
    const r2 = await b.claimScheduled(claimArgs('takeover', SLOT(2)));
    if (!r2.claimed) throw new Error(`expected takeover, got ${JSON.stringify(r2)}`);
    const old = (await new RunRecords(db).recent('takeover')).find((r) => r.id === r1.claim.runId)!;
    expect(old.status).toBe('failed');
    expect(old.error).toMatch(/abandoned/);
    expect(await a.renew(r1.claim, 5000)).toBe(false);
    await expect(cursors.write('takeover', 'watermark', { at: 0 }, r1.claim.token)).rejects.toBeInstanceOf(FencedWriteRefused);
    await cursors.write('takeover', 'watermark', { at: 2 }, r2.claim.token);
    expect(await cursors.read('takeover', 'watermark')).toEqual({ value: { at: 2 }, token: r2.claim.token });
    expect(await a.complete(r1.claim, { status: 'ok', items: 1 })).toBe(false); // cannot overwrite the abandoned record
  });

  it("the canary's end row is written with its fenced cursor, in one statement: a stale token writes neither", async () => {
    const a = new SlotClaims(db, 'old');
    const b = new SlotClaims(db, 'new');
    const canary = new CanaryRuns(db);
    await a.ensureJobs(['canary_t']);
    const r1 = await a.claimScheduled(claimArgs('canary_t', SLOT(11), 150));
    if (!r1.claimed) throw new Error('expected claim');
    await leaseExpired('canary_t');
    const r2 = await b.claimScheduled(claimArgs('canary_t', SLOT(12)));
    if (!r2.claimed) throw new Error('expected takeover');
    await canary.endFenced('canary_t', 'last_slot', SLOT(12).toISOString(), SLOT(12), 'new', r2.claim.token);
    await expect(canary.endFenced('canary_t', 'last_slot', SLOT(11).toISOString(), SLOT(11), 'old', r1.claim.token)).rejects.toBeInstanceOf(FencedWriteRefused);
    const ends = await db.query(`SELECT fencing_token FROM canary_runs WHERE phase = 'end' AND fencing_token = ANY($1::bigint[])`, [[r1.claim.token, r2.claim.token]]);
    expect(ends.rows.map((r) => Number(r.fencing_token))).toEqual([r2.claim.token]);
    expect(await new FencedCursors(db).read('canary_t', 'last_slot')).toEqual({ value: SLOT(12).toISOString(), token: r2.claim.token });
  });

  it('refuses a slot ahead of the database clock (a replica whose clock runs fast)', async () => {
    const a = new SlotClaims(db, 'fast');
    await a.ensureJobs(['future']);
    const r = await a.claimScheduled(claimArgs('future', new Date(Date.now() + 60_000)));
    expect(r).toEqual({ claimed: false, reason: expect.stringMatching(/ahead of the database clock/) });
  });

  it('refuses a second live process with the same instance id; takes over a stopped one', async () => {
    const info = { instanceId: 'dup', env: 'test', mode: 'cluster', httpPort: 1, version: 't', heartbeatMs: 5000 };
    const first = new InstanceRegistry(db, systemClock, info);
    await first.register();
    const second = new InstanceRegistry(db, systemClock, info);
    await expect(second.register()).rejects.toThrow(UserError);
    await expect(second.register()).rejects.toThrow(/instance id "dup" is already used by a live replica/);
    await first.markStopped();
    await second.register();
    expect((await first.beat(0)).mine).toBe(false); // the displaced process learns it at its next beat
    expect((await second.beat(0)).mine).toBe(true);
    expect(Math.abs(await second.measureSkew())).toBeLessThan(1000);
  });

  it('an instance id whose holder died on this host (pid gone) or lost its liveness key is free at once', async () => {
    const info = { instanceId: 'crashloop', env: 'test', mode: 'cluster', httpPort: 1, version: 't', heartbeatMs: 60_000 };
    const dead = spawnSync(process.execPath, ['-e', '0']).pid!; // a pid that has exited
    const first = new InstanceRegistry(db, systemClock, info);
    await first.register();
    // As if the first process had run, beaten a moment ago, and been SIGKILLed under that pid.
    await db.query(`UPDATE instances SET pid = $2, heartbeat_at = clock_timestamp() WHERE instance_id = $1`, ['crashloop', dead]);
    await new InstanceRegistry(db, systemClock, info).register();
    // A live pid on this host (the test runner's parent) still holds the id until its heartbeat window ends.
    await db.query(`UPDATE instances SET pid = $2, boot_id = gen_random_uuid(), heartbeat_at = clock_timestamp() WHERE instance_id = $1`, ['crashloop', process.ppid]);
    await expect(new InstanceRegistry(db, systemClock, info).register()).rejects.toThrow(/already used by a live replica/);
    // A published liveness key decides at once: no session holds it, so the holder is dead.
    await db.query(`UPDATE instances SET alive_key = 12345 WHERE instance_id = $1`, ['crashloop']);
    await new InstanceRegistry(db, systemClock, info).register();
  });

  it('admin sessions: stored hashed, bound to the admin token that minted them, verified until expiry', async () => {
    const sessions = new AdminSessions(db);
    const admin = 'admin-token-one-0123456789';
    const s = await sessions.create(5, admin);
    const { rows } = await db.query('SELECT token_hash, admin_fingerprint FROM admin_sessions WHERE id = $1', [s.id]);
    expect(rows[0]!.token_hash).not.toBe(s.token);
    expect(String(rows[0]!.admin_fingerprint)).not.toContain(admin);
    expect(await sessions.verify(s.token, admin)).toBe(true);
    expect(await sessions.verify(s.token, 'admin-token-two-0123456789')).toBe(false);
    expect(await sessions.verify(s.token, undefined)).toBe(false);
    expect(await sessions.verify('nope', admin)).toBe(false);
    await db.query(`UPDATE admin_sessions SET expires_at = now() - interval '1 minute' WHERE id = $1`, [s.id]);
    expect(await sessions.verify(s.token, admin)).toBe(false);
  });
});

describe('migrations of the kernel and the areas', () => {
  const m = (version: number, name: string) => ({ version, name, sql: `CREATE TABLE rj_mig_${name} (id int)` });
  it('one list in version order; a version used twice is refused naming both owners', () => {
    expect(
      collectMigrations([
        { owner: 'kernel', migrations: [m(1, 'a'), m(3, 'c')] },
        { owner: 'area x', migrations: [m(2, 'b')] },
      ]).map((x) => x.version),
    ).toEqual([1, 2, 3]);
    expect(() =>
      collectMigrations([
        { owner: 'kernel', migrations: [m(1, 'a'), m(2, 'b')] },
        { owner: 'area x', migrations: [m(2, 'mine')] },
      ]),
    ).toThrow('migration version 2 (area x: mine) is already taken by kernel: b; use the next number above the highest (3)');
  });
  it("the database's list is the kernel's and every listed area's", () => {
    const areas = AREAS.flatMap((a) => (a as { migrations?: readonly unknown[] }).migrations ?? []);
    expect(MIGRATIONS.length).toBe(KERNEL_MIGRATIONS.length + areas.length);
    expect(MIGRATIONS.map((x) => x.version)).toEqual([...MIGRATIONS.map((x) => x.version)].sort((x, y) => x - y));
  });
});

describe('migrations on PostgreSQL', () => {
  it('replicas starting together apply each migration exactly once', async () => {
    const { freshDatabase } = await import('./helpers/services.js');
    const { PgDb } = await import('../src/store/pg-db.js');
    const fresh = await freshDatabase();
    const dbs = await Promise.all(Array.from({ length: 4 }, () => PgDb.connect({ url: fresh.url, poolSize: 2, connectTimeoutMs: 5000 })));
    try {
      const applied = await Promise.all(dbs.map((d) => migrate(d)));
      expect(applied.map((a) => a.length).sort()).toEqual([0, 0, 0, MIGRATIONS.length]);
    } finally {
      await Promise.all(dbs.map((d) => d.close()));
      await fresh.drop();
    }
  });

  it("an area's migration is applied with the kernel's, in version order, once", async () => {
    const { freshDatabase } = await import('./helpers/services.js');
    const { PgDb } = await import('../src/store/pg-db.js');
    const fresh = await freshDatabase();
    const db = await PgDb.connect({ url: fresh.url, poolSize: 1, connectTimeoutMs: 5000 });
    try {
      // Version 9000 refers to a kernel table (accounts): it must run after the kernel's.
      const area = { version: 9000, name: 'area_probe', sql: 'CREATE TABLE rj_area_probe (account_id bigint REFERENCES accounts(id))' };
      const all = collectMigrations([
        { owner: 'the kernel', migrations: MIGRATIONS },
        { owner: 'area probe', migrations: [area] },
      ]);
      const applied = await applyMigrations(db, all);
      expect(applied.at(-1)).toEqual(area);
      expect((await db.query(`SELECT to_regclass('rj_area_probe') IS NOT NULL AS ok`)).rows[0]).toEqual({ ok: true });
      expect(await applyMigrations(db, all)).toEqual([]);
    } finally {
      await db.close();
      await fresh.drop();
    }
  });
});

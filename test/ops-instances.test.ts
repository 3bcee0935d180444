import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../src/app/config-schema.js';
import { type Config } from '../src/config/load.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { InstanceRegistry } from '../src/coordination/instance-registry.js';
import { ProcessSampler, type ProcessFigures } from '../src/telemetry/process-sampler.js';
import { opsStatus } from '../src/areas/ops/cli-ops-status.js';
import { cliContext } from '../src/cli/cli-context.js';
import { systemClock } from '../src/time/clock.js';
import { InstanceHeartbeat } from '../src/app/instance-heartbeat.js';
import { SkipCounter } from '../src/coordination/skip-counter.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { LivenessSession } from '../src/coordination/liveness.js';
import { Memberships } from '../src/coordination/memberships.js';
import type { Db } from '../src/store/db.js';
import { BACKENDS } from './helpers/backends.js';
import { outcomeOf } from './helpers/rounds.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { Deadline } from '../src/time/deadline.js';
import { waitFor } from './helpers/wait.js';
import type { IntervalHistogram } from 'node:perf_hooks';

const ADMIN = 'ops-instances-admin-token-0123';
const MIB = 1_048_576;
const figures = (lag: number, rssMib: number, heapMib: number, cpu: number): ProcessFigures => ({
  rss_bytes: rssMib * MIB,
  heap_used_bytes: heapMib * MIB,
  event_loop_lag_p99_ms: lag,
  cpu_percent: cpu,
});
const registry = (db: Db, id: string) => new InstanceRegistry(db, systemClock, { instanceId: id, env: 'test', mode: 'cluster', httpPort: null, version: 't', heartbeatMs: 5000 });

describe('process sampler', () => {
  it('CPU % is the CPU time over the wall time since the previous sample; loop lag is measured and reset per sample', async () => {
    let cpu = { user: 0, system: 0 };
    let now = 1000;
    const s = new ProcessSampler({ memory: () => ({ rss: 10 * MIB, heapUsed: 4 * MIB }), cpu: () => cpu, now: () => now });
    cpu = { user: 300_000, system: 200_000 }; // 0.5 s of CPU
    now += 2000; // over 2 s of wall time
    // The loop-delay histogram is real (a 10 ms timer): the test waits on its recorded ticks, read from the sampler.
    const ticks = () => (s as unknown as { loop: IntervalHistogram }).loop.count;
    const tick = { intervalMs: 2 };
    await waitFor(() => ticks() >= 1, { ...tick, what: 'a tick of the loop-delay histogram before the stall' });
    const beforeStall = ticks();
    const block = performance.now();
    // Stall the loop for half a second: the second interval's p99 must come out below it, so a
    // descheduled worker or a major GC in those ordinary ticks (tens of ms on a loaded machine, a
    // 150 ms stall left little room) cannot pass for the stall.
    while (performance.now() - block < 500);
    await waitFor(() => ticks() > beforeStall, { ...tick, what: 'the tick after the stall, which records it' });
    const first = s.sample();
    expect(first).toMatchObject({ rss_bytes: 10 * MIB, heap_used_bytes: 4 * MIB, cpu_percent: 25 });
    expect(first.event_loop_lag_p99_ms).toBeGreaterThanOrEqual(250);
    cpu = { user: 400_000, system: 200_000 };
    now += 1000;
    await waitFor(() => ticks() >= 3, { ...tick, what: 'three ordinary ticks after the first sample' });
    const second = s.sample();
    expect(second.cpu_percent).toBe(10);
    expect(second.event_loop_lag_p99_ms).toBeLessThan(first.event_loop_lag_p99_ms!); // the stall belonged to the previous interval
    s.close();
  });
});

describe.each(BACKENDS)('instances carry their process figures ($name)', (backend) => {
  let db: Db;
  let cleanup: () => Promise<void>;
  beforeAll(async () => ({ db, cleanup } = await backend.open()));
  afterAll(() => cleanup());

  it('the beat stays one statement with the figures; a stale or stopped replica shows none', async () => {
    const a = registry(db, 'a');
    const b = registry(db, 'b');
    await a.register();
    await b.register();
    const q0 = db.stats.queries;
    await a.beat(0, null, [{ job: 'canary', n: 2, at: new Date().toISOString(), reason: 'not leader' }], figures(12, 100, 50, 20));
    await b.beat(0, null, [], figures(30, 200, 30, 5));
    expect(db.stats.queries - q0).toBe(2); // one statement per beat, figures and skips included
    let list = await a.list();
    expect(list.find((i) => i.instance_id === 'a')!.process).toEqual(figures(12, 100, 50, 20));
    // A beat without figures (the skip flush at shutdown) keeps the previous ones.
    await a.beat(0, null, [], null);
    expect((await a.list()).find((i) => i.instance_id === 'a')!.process).toEqual(figures(12, 100, 50, 20));
    await db.query(`UPDATE instances SET heartbeat_at = heartbeat_at - interval '1 hour', process_at = process_at - interval '1 hour' WHERE instance_id = 'b'`);
    await a.markStopped();
    list = await a.list();
    expect(list.map((i) => [i.instance_id, i.alive, i.process])).toEqual([
      ['a', false, null],
      ['b', false, null],
    ]);
    expect(list.find((i) => i.instance_id === 'b')!.process_at).toBeInstanceOf(Date); // how old the last figures are is still shown
  });

  it("alive needs the published liveness key held, whatever the beat says; a restart under the same id clears the last life's key", async () => {
    const killed = registry(db, 'k');
    await killed.register();
    await db.query(`UPDATE instances SET alive_key = 987654 WHERE instance_id = 'k'`); // its key, held by nobody: the process was killed
    const k = async () => (await killed.list()).find((i) => i.instance_id === 'k');
    expect(await k()).toMatchObject({ alive: false, lease_alive: false });
    // The same id starts again: until its first beat on its own liveness session it is alive by its fresh beat,
    // not dead by the previous life's key (the doctor named a replica that had just restarted).
    const restarted = registry(db, 'k');
    await restarted.register();
    expect(await k()).toMatchObject({ alive: true, lease_alive: true });
    await restarted.markStopped();
  });
});

/** The collector records every live replica's figures from its heartbeat; the cluster series is the worst fresh one. */
describe('ops_metrics per-instance process figures (PostgreSQL)', () => {
  const prefix = uniqueName('rjopsi');
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let config: Config;
  let rt: Runtime;
  let http: FastifyInstance;
  const api = (url: string, method: 'GET' | 'POST' = 'GET', payload?: object) => http.inject({ method, url: `/api/v1${url}`, headers: { authorization: `Bearer ${ADMIN}` }, payload });

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    config = loadConfig({
      env: {
        DATABASE_URL: fresh.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'main',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__OPS__BUCKET: '1h',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    await http.ready();
  });
  afterAll(async () => {
    await http?.close();
    await rt?.shutdown();
    await fresh.drop();
    await dropRedisPrefix(prefix);
  });

  it('records both live replicas, excludes a dead one and a stale beat, and the max feeds event_loop_lag_ms', async () => {
    const [r1, r2, dead, stopped, silent] = ['r1', 'r2', 'dead', 'stopped', 'silent'].map((id) => registry(rt.db, id));
    for (const r of [r1, r2, dead, stopped, silent]) await r!.register();
    await dead!.beat(0, null, [], figures(900, 900, 900, 99));
    await stopped!.beat(0, null, [], figures(800, 800, 800, 98));
    await silent!.beat(0, null, [], figures(700, 700, 700, 97));
    // dead stopped beating an hour ago; stopped shut down; silent still beats but its figures are old.
    await rt.db.query(`UPDATE instances SET heartbeat_at = heartbeat_at - interval '1 hour', process_at = process_at - interval '1 hour' WHERE instance_id = 'dead'`);
    await stopped!.markStopped();
    await rt.db.query(`UPDATE instances SET process_at = process_at - interval '1 hour' WHERE instance_id = 'silent'`);
    await silent!.beat(0, null, [], null);
    // r1 beats on its liveness session (cluster mode's path: the lock self-check rides on the same statement).
    const session = new LivenessSession(rt.db, silentLogger(), 100);
    await session.start();
    expect((await r1!.beat(0, session, [], figures(12.5, 120, 60, 35))).mine).toBe(true);
    expect(session.key).not.toBeNull();
    await r2!.beat(0, null, [], figures(40, 300, 40, 8));

    // r1's session is held through the round: a published liveness key whose session has ended reads not alive.
    expect(outcomeOf(await rt.runNow('ops_metrics'))?.status).toBe('ok');
    await session.stop(Deadline.within(systemClock, 1000));
    const row = (
      await rt.db.query<{ bucket: Date; metrics: Record<string, number | null>; instances: Array<{ instance_id: string; alive: boolean; process: ProcessFigures | null }> }>(
        `SELECT bucket, metrics, instances FROM ops_metrics_minute ORDER BY bucket DESC LIMIT 1`,
      )
    ).rows[0]!;
    const byId = Object.fromEntries(row.instances.map((i) => [i.instance_id, i]));
    expect(byId.r1!.process).toEqual(figures(12.5, 120, 60, 35));
    expect(byId.r2!.process).toEqual(figures(40, 300, 40, 8));
    expect(byId.dead).toMatchObject({ alive: false, process: null });
    expect(byId.stopped).toMatchObject({ alive: false, process: null });
    expect(byId.silent).toMatchObject({ alive: true, process: null });
    expect(byId.main).toMatchObject({ alive: true, process: null }); // registered, its heartbeat not started
    // The cluster-wide series are the worst fresh live replica's, never a dead one's last word.
    expect(row.metrics).toMatchObject({ event_loop_lag_ms: 40, rss_bytes: 300 * MIB, heap_used_bytes: 60 * MIB, cpu_percent: 35, instances_alive: 4 });

    // An alert rule on event_loop_lag_ms sees that maximum.
    const rule = await api('/ops/alert-rules', 'POST', {
      name: 'loop lag',
      metric: 'event_loop_lag_ms',
      operator: '>=',
      threshold: 40,
      window: '1h',
      sustained: 1,
      severity: 'warning',
      notify: false,
    });
    expect(rule.statusCode).toBe(201);
    expect(outcomeOf(await rt.runNow('ops_alert_evaluator'))?.status).toBe('ok');
    const firing = (await api('/ops/alert-events?state=firing')).json().events;
    expect(firing.map((e: { rule_name: string; value: number }) => [e.rule_name, e.value])).toEqual([['loop lag', 40]]);

    // The API shows them per instance: the overview, and the buckets when asked.
    const o = (await api('/ops/overview')).json();
    expect(o.instances.find((i: { instance_id: string }) => i.instance_id === 'r2').process).toEqual(figures(40, 300, 40, 8));
    expect(o.instances.find((i: { instance_id: string }) => i.instance_id === 'dead').process).toBeNull();
    const range = `from=${row.bucket.toISOString()}&to=${new Date(row.bucket.getTime() + 3_600_000).toISOString()}`;
    const points = (await api(`/ops/metrics?${range}&instances=true`)).json().points;
    expect(points).toHaveLength(1);
    expect(points[0].instances.find((i: { instance_id: string }) => i.instance_id === 'r1').process.event_loop_lag_p99_ms).toBe(12.5);
    expect((await api(`/ops/metrics?${range}`)).json().points[0]).not.toHaveProperty('instances');
    expect((await api('/ops/metrics?instances=yes')).statusCode).toBe(400);

    // A real heartbeat publishes this process's own figures.
    const own = registry(rt.db, 'beating');
    await own.register();
    const beat = new InstanceHeartbeat({
      config,
      registry: own,
      metrics: new Metrics({ defaultMetrics: false }),
      log: silentLogger(),
      clock: systemClock,
      views: async () => [],
      skips: new SkipCounter(),
      liveness: null,
      memberships: new Memberships('beating', []),
    });
    beat.start();
    const published = await waitFor(async () => (await own.list()).find((x) => x.instance_id === 'beating')!.process, { what: 'the heartbeat publishing its process figures' }).finally(() =>
      beat.stop(Deadline.within(systemClock, 1000)),
    );
    expect(published.rss_bytes).toBeGreaterThan(MIB);
    expect(published.heap_used_bytes).toBeGreaterThan(0);
    expect(published.cpu_percent).toBeTypeOf('number');

    // relay-jobs ops status prints them.
    let out = '';
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((s) => ((out += String(s)), true));
    try {
      await opsStatus(config, false, cliContext);
    } finally {
      spy.mockRestore();
    }
    expect(out).toMatch(/r2\s+alive .* rss 300MiB {2}heap 40MiB {2}loop p99 40ms {2}cpu 8%/);
    expect(out).toMatch(/dead\s+gone .* process -/);
    expect(out).toMatch(/outbox: backlog 0 \(0 waiting for the rate limit\), oldest 0s/);
  });
});

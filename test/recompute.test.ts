import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { ManualClock } from '../src/time/clock.js';
import type { JobContext } from '../src/scheduler/job.js';
import { Redis } from 'ioredis';
import { RedisLeaderLock } from '../src/coordination/leader-lock.js';
import { captureLogs } from './helpers/log-capture.js';
import { waitFor } from './helpers/wait.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const ADMIN = 'recompute-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** Usage recomputes are database tasks: bounded, cancellable, resumable after an aborted round, visible from any replica. */
describe('usage recompute tasks (real PostgreSQL)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let rt: Runtime;
  let http: FastifyInstance;
  const prefix = uniqueName('rjrec');
  const logs = captureLogs('rec');
  const clock = new ManualClock(Math.floor(Date.now() / HOUR) * HOUR + 30 * 60_000);
  const post = (url: string, payload?: unknown) => http.inject({ method: 'POST', url, headers: auth, payload: payload as object });
  const ctx = (signal: AbortSignal): JobContext => ({ instanceId: 'rec-1', log: logs.logger, signal }) as unknown as JobContext;

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'rec-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
      },
    });
    rt = await Runtime.create(config, { clock, logger: logs.logger });
    http = buildHttpServer(rt);
  });
  afterAll(async () => {
    await rt.shutdown();
    await http.close();
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  it('refuses an empty or over-long range with 400 naming the field, storing nothing', async () => {
    const now = clock.now();
    const long = await post('/api/v1/usage/recompute', { from: new Date(now - 400 * DAY).toISOString(), to: new Date(now).toISOString() });
    expect(long.statusCode).toBe(400);
    expect(long.json().error.fields).toEqual([{ field: 'to', message: expect.stringMatching(/at most 366 days/) }]);
    const backwards = await post('/api/v1/usage/recompute', { from: new Date(now).toISOString(), to: new Date(now - DAY).toISOString() });
    expect(backwards.statusCode).toBe(400);
    expect((await http.inject({ url: '/api/v1/usage/recompute', headers: auth })).json().recomputes).toEqual([]);
  });

  it('a round stopped mid-range hands the task back; the next round resumes at the stored chunk and finishes it', async () => {
    const hour = Math.floor(clock.now() / HOUR) * HOUR;
    const task = await rt.services.recomputes.request(new Date(hour - 3 * DAY), new Date(hour - DAY));
    expect(task.chunks).toBe(2);
    const stop = new AbortController();
    // Abort right after the first chunk's progress is stored.
    const tasks = rt.services.recomputes.tasks;
    const progress = tasks.progress.bind(tasks);
    tasks.progress = async (...args) => {
      const r = await progress(...args);
      stop.abort(new Error('shutdown'));
      return r;
    };
    await rt.services.recomputes.runOne(ctx(stop.signal));
    tasks.progress = progress;
    const mid = (await tasks.get(task.id))!;
    expect(mid).toMatchObject({ status: 'pending', chunks_done: 1, claimed_by: null });
    expect(Date.parse(mid.next_start)).toBe(Date.parse(task.next_start) + DAY);

    await rt.services.recomputes.runOne(ctx(new AbortController().signal));
    expect(await tasks.get(task.id)).toMatchObject({ status: 'done', chunks_done: 2 });
  });

  it('a cancelled task is never run; the API shows it and refuses a second cancel', async () => {
    const now = clock.now();
    const created = await post('/api/v1/usage/recompute', { from: new Date(now - 2 * DAY).toISOString(), to: new Date(now - DAY).toISOString() });
    expect(created.statusCode).toBe(202);
    const id = created.json().id as number;
    // The route asked for a round at once; cancel whatever it did not finish, then nothing is claimable.
    const cancel = await post(`/api/v1/usage/recompute/${id}/cancel`);
    if (cancel.statusCode === 200) {
      expect(cancel.json().status).toBe('cancelled');
      expect(await rt.services.recomputes.runOne(ctx(new AbortController().signal))).toBe(0);
      expect((await post(`/api/v1/usage/recompute/${id}/cancel`)).statusCode).toBe(409);
    } else {
      expect(cancel.statusCode).toBe(409);
      expect((await http.inject({ url: `/api/v1/usage/recompute/${id}`, headers: auth })).json().status).toBe('done');
    }
    expect((await http.inject({ url: '/api/v1/usage/recompute/999999', headers: auth })).statusCode).toBe(404);
  });
  it('requested while another replica runs dashboard_aggregation: runs as soon as that round ends, not at the next slot', async () => {
    // The runtime is never started: no scheduled slot ever comes, so only the route's request can run it.
    const redis = new Redis(REDIS_URL);
    try {
      // Taken once the round the test before requested has ended.
      const lock = new RedisLeaderLock(redis, { prefix, env: 'test' }, 'rec-2');
      const other = await waitFor(
        async () => {
          const a = await lock.acquire('dashboard_aggregation', 120_000);
          return a.acquired && a;
        },
        { what: "the other replica's lock" },
      );
      const now = clock.now();
      const created = await post('/api/v1/usage/recompute', { from: new Date(now - 3 * DAY).toISOString(), to: new Date(now - 2 * DAY).toISOString() });
      expect(created.statusCode).toBe(202);
      const id = created.json().id as number;
      const status = async () => (await http.inject({ url: `/api/v1/usage/recompute/${id}`, headers: auth })).json().status as string;
      // Refused while the other round holds the lock, through several of the request's retries.
      const refused = () => logs.lines.filter((l) => l.msg === 'round skipped' && l.job === 'dashboard_aggregation').length;
      await waitFor(() => refused() >= 1, { what: 'the first refused attempt' });
      for (let i = 0; i < 4; i++) {
        const n = refused();
        await clock.advance(5000);
        await waitFor(() => refused() > n, { what: `refused attempt ${n + 1}` });
      }
      expect(await status()).toBe('pending');
      // The other round ends: within one retry step the request runs a round that takes the task.
      await other.handle.release();
      await clock.advance(5000);
      await waitFor(async () => (await status()) === 'done', { what: 'the recompute done after the other round ended', timeoutMs: 60_000 });
    } finally {
      redis.disconnect();
    }
  });
});

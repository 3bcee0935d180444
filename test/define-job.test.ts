import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { type Config } from '../src/config/load.js';
import { ConfigError } from '../src/config/errors.js';
import { InvalidInput, NotFound } from '../src/errors/app-error.js';
import { Runtime } from '../src/app/runtime.js';
import { defineJob } from '../src/modules/define-job.js';
import { AREAS, MEMBERSHIPS, buildJobs, checkJobSections, memberships } from '../src/app/registry.js';
import type { AnyArea } from '../src/modules/area.js';
import { captureLogs } from './helpers/log-capture.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const events: string[] = [];

/** A library user's job: one declaration, its own option, the services it needs, lifecycle hooks. */
const toyJob = defineJob({
  name: 'toy_greeter',
  description: 'Says hello once per slot, cluster-wide',
  scope: 'cluster',
  options: { greeting: z.string().min(1).default('hello') },
  defaults: { enabled: true, every: '1s', timeout: '5s' },
  needs: ['metrics'],
  onStart: () => void events.push('start'),
  onStop: async () => void events.push('stop'),
  async run(ctx, { metrics }, o) {
    expect(metrics.registry).toBeDefined();
    await ctx.cursor.write('last_greeting', `${o.greeting} @ ${ctx.slot.toISOString()}`);
    return { items: 1, note: `${o.greeting} from ${ctx.instanceId}` };
  },
});

describe('defineJob: a job added by a library user runs through the cluster path', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  const runtimes: Runtime[] = [];
  const prefix = uniqueName('rjtoy');
  const env = (id: string, extra: Record<string, string> = {}) => ({
    DATABASE_URL: db.url,
    REDIS_URL,
    RELAY_JOBS_INSTANCE_ID: id,
    RELAY_JOBS_ENV: 'test',
    RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
    RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
    RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
    RELAY_JOBS__DATABASE__POOL_SIZE: '3',
    RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: '1',
    ...extra,
  });

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
  });
  afterAll(async () => {
    await Promise.all(runtimes.map((r) => r.shutdown()));
    await sql.end();
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  it('validates its options with the key path, and an unknown key, like every other job', () => {
    const bad = (extra: Record<string, string>) => {
      try {
        buildJobs(loadConfig({ env: env('x', extra), checkJobs: checkJobSections([toyJob]) }), undefined, [toyJob]);
      } catch (err) {
        if (err instanceof ConfigError) return err.problems.join('\n');
        throw err;
      }
      return '';
    };
    expect(bad({ RELAY_JOBS__JOBS__TOY_GREETER__GREETING: '' })).toMatch(/jobs\.toy_greeter\.greeting \(RELAY_JOBS__JOBS__TOY_GREETER__GREETING\)/);
    expect(bad({ RELAY_JOBS__JOBS__TOY_GREETER__COLOUR: 'red' })).toMatch(/jobs\.toy_greeter\.colour.*unknown key/);
    expect(bad({ RELAY_JOBS__JOBS__TOY_GRETER__EVERY: '1s' })).toMatch(/jobs\.toy_greter.*did you mean toy_greeter/);
    // A membership (coordination/memberships.ts) is declared by an area for one of its own jobs, once; a
    // library job, whatever it carries (the old `sharded` flag here), makes no replica a member of one.
    for (const area of AREAS as readonly AnyArea[]) for (const m of area.memberships ?? []) expect(area.jobs.map((j) => j.name)).toContain(m.job);
    expect(new Set(MEMBERSHIPS.map((m) => m.name)).size).toBe(MEMBERSHIPS.length);
    const withToy = buildJobs(loadConfig({ env: env('x'), checkJobs: checkJobSections([toyJob]) }), undefined, [{ ...toyJob, sharded: true } as typeof toyJob]);
    expect(memberships('x', withToy).joined).toEqual(MEMBERSHIPS.filter((m) => withToy.some((j) => j.name === m.job && j.settings.enabled)).map((m) => m.name));
    expect(memberships('x', withToy).joined).not.toContain('toy_greeter');
    // A job defined with neither `every` nor `cron` is a config error naming the keys (it was a RangeError
    // from the first job view and an unhandled rejection from the scheduler); the config can give it one.
    const unscheduled = { ...toyJob, name: 'toy_unscheduled', defaults: { enabled: true, timeout: '5s' } } as typeof toyJob;
    const noSchedule =
      (extra: Record<string, string> = {}) =>
      () =>
        buildJobs(loadConfig({ env: env('x', extra), checkJobs: checkJobSections([unscheduled]) }), undefined, [unscheduled]);
    expect(noSchedule()).toThrow(ConfigError);
    expect(noSchedule()).toThrow(
      /^config error: jobs\.toy_unscheduled\.every: toy_unscheduled has no schedule; set jobs\.toy_unscheduled\.every \(a duration such as "5m"\) or jobs\.toy_unscheduled\.cron/,
    );
    expect(
      buildJobs(loadConfig({ env: env('x', { RELAY_JOBS__JOBS__TOY_UNSCHEDULED__EVERY: '1m' }), checkJobs: checkJobSections([unscheduled]) }), undefined, [unscheduled]).find(
        (j) => j.name === 'toy_unscheduled',
      )!.settings.schedule,
    ).toMatchObject({ kind: 'every', everyMs: 60_000 });
    // What defineJob can be handed that fails later: a name that cannot be a config section or a lock
    // key, a scope that is neither, no run. Each is a config problem naming the job.
    const malformed = (patch: Record<string, unknown>) => () => buildJobs(loadConfig({ env: env('x') }), undefined, [{ ...toyJob, ...patch } as typeof toyJob]);
    expect(malformed({ name: 'toy greeter' })).toThrow(/job "toy greeter": a job's name is 1-128 letters, digits, _ and -, starting with a letter/);
    expect(malformed({ name: 'toy:greeter' })).toThrow(/job "toy:greeter": a job's name/);
    expect(malformed({ name: '' })).toThrow(/job "": a job's name/);
    expect(() => buildJobs(loadConfig({ env: env('x') }), undefined, [{ ...toyJob, name: 'nightly-Report' } as typeof toyJob])).not.toThrow(); // names that ran before still do
    expect(malformed({ name: 42 })).toThrow(/job "number": a job's name/);
    expect(malformed({ scope: 'everywhere' })).toThrow(/job toy_greeter: scope is "cluster" .* or "instance" .*, not "everywhere"/);
    expect(malformed({ run: undefined })).toThrow(/job toy_greeter: run must be a function/);
    // Without the job, its section is an unknown job.
    expect(() => loadConfig({ env: env('x', { RELAY_JOBS__JOBS__TOY_GREETER__GREETING: 'hi' }), checkJobs: checkJobSections() })).toThrow(/jobs\.toy_greeter.*unknown job/);
  });

  it('two replicas run each 1 s slot once between them, with the option, hooks and services bound', async () => {
    const logs = captureLogs('toy');
    for (const id of ['toy-a', 'toy-b']) {
      const config: Config = loadConfig({ env: env(id, { RELAY_JOBS__JOBS__TOY_GREETER__GREETING: 'bonjour' }), checkJobs: checkJobSections([toyJob]) });
      const rt = await Runtime.create(config, { jobs: [toyJob], logger: logs.logger });
      runtimes.push(rt);
      rt.start();
    }
    expect(events.filter((e) => e === 'start')).toHaveLength(2);
    const okRounds = async () => Number((await sql.query(`SELECT count(*) AS n FROM job_runs WHERE job_name = 'toy_greeter' AND status = 'ok'`)).rows[0].n);
    await expect.poll(okRounds, { timeout: 60_000, interval: 250 }).toBeGreaterThanOrEqual(4);
    const dupes = await sql.query(`SELECT slot, count(*) AS n FROM job_runs WHERE job_name = 'toy_greeter' AND status NOT IN ('skipped_not_leader') GROUP BY slot HAVING count(*) > 1`);
    expect(dupes.rows).toEqual([]);
    const notes = await sql.query(`SELECT DISTINCT note FROM job_runs WHERE job_name = 'toy_greeter' AND status = 'ok'`);
    for (const r of notes.rows) expect(r.note).toMatch(/^bonjour from toy-[ab]$/);
    const cursor = await sql.query(`SELECT value FROM job_cursors WHERE job_name = 'toy_greeter' AND key = 'last_greeting'`);
    expect(cursor.rows[0].value).toMatch(/^bonjour @ /);
    // A library call with a name or id no typed caller would pass: the error says what was wrong, as a
    // rejection (runNow threw synchronously, a plain Error; getAccessToken surfaced PostgreSQL's 22P02).
    const rt = runtimes[0]!;
    await expect(rt.runNow('nope')).rejects.toThrow(NotFound);
    await expect(rt.runNow('nope')).rejects.toThrow(/^unknown job "nope" \(known jobs: .*, toy_greeter\)$/);
    await expect(rt.services.tokens.getAccessToken('abc' as unknown as number)).rejects.toThrow(InvalidInput);
    await expect(rt.services.tokens.getAccessToken('abc' as unknown as number)).rejects.toThrow('id: an account id is a positive integer (got "abc")');
    await expect(rt.services.tokens.getAccessToken(1.5)).rejects.toThrow('(got 1.5)');
    await expect(rt.services.tokens.reportUnauthorized(-1)).rejects.toThrow('(got -1)');
    await Promise.all(runtimes.map((r) => r.shutdown()));
    expect(events.filter((e) => e === 'stop')).toHaveLength(2);
  });
});

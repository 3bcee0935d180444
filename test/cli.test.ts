import { describe, it, vi, type ExpectStatic } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { runCli, ServiceProcess } from './helpers/cli.js';
import { freePort, freshDatabase, REDIS_URL, TEST_MASTER_KEY } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { JOBS } from '../src/app/registry.js';

// Each test spawns the CLI, and a cold embedded start takes 8-14 s on a quiet machine and far
// more on a loaded one: the limits leave a real margin over that (runCli and waitForLine allow 180 s: a cold `migrate` took 75 s at load average 30).
vi.setConfig({ testTimeout: 400_000 });
// A `config check` child spends 1-2 s of CPU loading the CLI and little else: the bad-input cases
// run concurrently (each with its test context's `expect`), and problems reported together share a
// child. The embedded service starts on the data directory `migrate` has just migrated (a copy of
// the unmigrated template). The two tests that open PGlite run one after the other, side by side
// with the light ones.

function tmp(): string {
  return mkdtempSync(join(tmpdir(), 'rj-cli-'));
}
function yaml(text: string): string {
  const f = join(tmp(), 'c.yaml');
  writeFileSync(f, text);
  return f;
}

/** A user error: non-zero exit, one line per problem on stderr, no stack trace. */
function expectUserError(expect: ExpectStatic, r: { code: number | null; stderr: string }, pattern: RegExp) {
  expect(r.code).not.toBe(0);
  expect(r.stderr).toMatch(pattern);
  expect(r.stderr).not.toMatch(/\n\s+at /);
  expect(r.stderr).toMatch(/^relay-jobs: /);
}

/**
 * Problems the config check reports together (one `config errors:` block, one line each) share
 * one child: a `config check` child spends 1-2 s of CPU loading the CLI and little else. Each
 * pattern must match its own line of that block, so every problem is still reported, as an error.
 */
function expectUserErrors(expect: ExpectStatic, r: { code: number | null; stderr: string }, patterns: RegExp[]) {
  expectUserError(expect, r, /^relay-jobs: config errors:\n/);
  const lines = r.stderr.split('\n').slice(1);
  for (const pattern of patterns)
    expect(
      lines.filter((l) => /^ {2}\S/.test(l) && pattern.test(l)),
      `one error line matching ${pattern}`,
    ).toHaveLength(1);
}

describe.concurrent('CLI bad input', () => {
  const cases: Array<[string, Record<string, string>, RegExp]> = [
    ['malformed YAML', { RELAY_JOBS_CONFIG: yaml('jobs: [\n') }, /malformed YAML/],
    ['only one of the cluster URLs', { DATABASE_URL: 'postgres://postgres@127.0.0.1/x' }, /needs both DATABASE_URL and REDIS_URL/],
    ['cluster without instance id', { DATABASE_URL: 'postgres://postgres@127.0.0.1/x', REDIS_URL }, /RELAY_JOBS_INSTANCE_ID/],
  ];
  for (const [name, env, pattern] of cases) {
    it(`config check: ${name}`, async ({ expect }) => expectUserError(expect, await runCli(['config', 'check'], env), pattern));
  }

  it('config check: unknown key, unknown job, wrong type and negative duration, each named', async ({ expect }) => {
    const env = { RELAY_JOBS_CONFIG: yaml('jobs:\n  canary:\n    evry: 1s\n    enabled: maybe\n  nightly_magic:\n    every: 1h\n'), RELAY_JOBS__JOBS__CANARY__EVERY: '-5s' };
    expectUserErrors(expect, await runCli(['config', 'check'], env), [
      /jobs\.canary\.evry .*unknown key/,
      /jobs\.nightly_magic .*unknown job/,
      /jobs\.canary\.enabled/,
      /jobs\.canary\.every \(RELAY_JOBS__JOBS__CANARY__EVERY\): expected a duration/,
    ]);
  });

  it('config check: lock TTL shorter than the timeout, and a provider that is not built in without token_url', async ({ expect }) => {
    const env = { RELAY_JOBS__JOBS__CANARY__TIMEOUT: '10s', RELAY_JOBS__JOBS__CANARY__LOCK_TTL: '5s', RELAY_JOBS__OAUTH__PROVIDERS__MYCORP__CLIENT_ID: 'x' };
    expectUserErrors(expect, await runCli(['config', 'check'], env), [
      /jobs\.canary\.lock_ttl \(5s\) must be longer than jobs\.canary\.timeout \(10s\)/,
      /oauth\.providers\.mycorp: a platform that is not built in needs both token_url and client_id/,
    ]);
  });

  it('start: unreachable PostgreSQL and unreachable Redis are one-line errors', async ({ expect }) => {
    const dead = await freePort();
    // STARTUP_WAIT 0: one attempt (waiting for a database not up yet is test/startup-wait.e2e's).
    const base = { RELAY_JOBS_INSTANCE_ID: 'a', RELAY_JOBS_ENV: 'test', RELAY_JOBS__DATABASE__CONNECT_TIMEOUT: '2s', RELAY_JOBS__DATABASE__STARTUP_WAIT: '0s', RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY };
    // The two children are independent: the PostgreSQL one runs while the Redis one's database is created.
    const dbP = freshDatabase();
    try {
      const [pgDown, redisDown] = await Promise.all([
        // Port 0 (any free port): start checks its port first, and these run side by side.
        runCli(['start'], { ...base, RELAY_JOBS_HTTP_PORT: '0', DATABASE_URL: `postgres://postgres:hunter2@127.0.0.1:${dead}/x`, REDIS_URL }),
        dbP.then((db) => runCli(['start'], { ...base, RELAY_JOBS_HTTP_PORT: '0', DATABASE_URL: db.url, REDIS_URL: `redis://127.0.0.1:${dead}` })),
      ]);
      expectUserError(expect, pgDown, /cannot connect to PostgreSQL at postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:\d+\/x \(DATABASE_URL\): connection refused/);
      expectUserError(expect, redisDown, /cannot connect to Redis at redis:\/\/127\.0\.0\.1:\d+ \(REDIS_URL\)/);
      expect(redisDown.stderr).not.toContain('hunter2');
    } finally {
      await dbP.then(
        (db) => db.drop(),
        () => undefined,
      );
    }
  });

  it('start: cluster mode without a master key, or with a malformed one, is refused before connecting', async ({ expect }) => {
    const base = { RELAY_JOBS_INSTANCE_ID: 'a', RELAY_JOBS_ENV: 'test', DATABASE_URL: 'postgres://postgres@127.0.0.1:1/x', REDIS_URL };
    const [noKey, shortKey] = await Promise.all([runCli(['start'], { ...base, RELAY_JOBS_HTTP_PORT: '0' }), runCli(['config', 'check'], { ...base, RELAY_JOBS_MASTER_KEY: 'short' })]);
    expectUserError(expect, noKey, /RELAY_JOBS_MASTER_KEY is not set: cluster mode encrypts account credentials/);
    expectUserError(expect, shortKey, /security\.master_key \(RELAY_JOBS_MASTER_KEY\): expected 32 random bytes/);
  });

  it('a mistyped command, option or config path: exit 2 (a user error, never 1, which is a result), naming what was wrong', async ({ expect }) => {
    const env = { RELAY_JOBS_DATA_DIR: tmp() };
    const [option, command, file] = await Promise.all([runCli(['jobs', '--jsn'], env), runCli(['strat'], env), runCli(['config', 'check', '-c', '/nonexistent/relay.yaml'], env)]);
    for (const r of [option, command, file]) expect(r.code, r.stderr).toBe(2);
    expectUserError(expect, option, /unknown option '--jsn'\n\(Did you mean --json\?\)/);
    expectUserError(expect, command, /unknown command 'strat'\n\(Did you mean start\?\)/);
    expectUserError(expect, file, /cannot read config file \/nonexistent\/relay\.yaml \(-c\/--config\): no such file$/m);
  });

  it('run: an unknown job is named with the list of known ones', async ({ expect }) => {
    expectUserError(expect, await runCli(['run', 'nope'], { RELAY_JOBS_DATA_DIR: tmp() }), new RegExp(`unknown job "nope" \\(known jobs: ${JOBS.map((j) => j.name).join(', ')}\\)`));
  });
});

// Side by side with the bad-input cases: the two commands that open no database, concurrently.
describe.concurrent('CLI commands', () => {
  it('jobs --json lists every job with its effective schedule', async ({ expect }) => {
    const [r, table] = await Promise.all([
      runCli(['jobs', '--json', '--config-only'], { RELAY_JOBS__JOBS__CANARY__ENABLED: 'true', RELAY_JOBS__JOBS__CANARY__EVERY: '2s' }),
      runCli(['jobs', '--config-only'], {}),
    ]);
    expect(r.code).toBe(0);
    const jobs = JSON.parse(r.stdout) as Array<{ name: string; enabled: boolean; schedule: unknown }>;
    expect(jobs.find((j) => j.name === 'canary')).toMatchObject({ enabled: true, schedule: { every: '2s' } });
    expect(table.stdout).toMatch(/^JOB\s+ENABLED/);
  });

  it('config check prints a summary, secrets redacted', async ({ expect }) => {
    const r = await runCli(['config', 'check', '--print'], { RELAY_JOBS_ADMIN_TOKEN: 'super-secret-admin-token' });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/config ok: embedded mode/);
    expect(r.stdout).not.toContain('super-secret-admin-token');
  });
});

// Also side by side with the above (the suite is concurrent), but its two tests that open PGlite
// run one after the other (`it.sequential`): two cold PGlite opens side by side took over 180 s at
// load average 22. Same suite name as above: the tests keep their names.
describe('CLI commands', { concurrent: true }, () => {
  // One data directory for both: the `migrate` after the service's exit is the second run that
  // finds the database up to date, and proves the directory is free again (one child fewer).
  it.sequential(
    'migrate applies once; embedded service: a second process on the data dir is refused, `run` goes through the service, SIGTERM exits 0; migrate then reports up to date',
    async ({ expect }) => {
      const dir = embeddedDataDir(undefined, { migrated: false }); // created, not migrated: no cold PGlite open
      expect((await runCli(['migrate'], { RELAY_JOBS_DATA_DIR: dir })).stdout).toMatch(/applied 1_core/);
      const port = String(await freePort());
      // A 10-minute grace: an exit that waited for the grace period instead of the drain would hit the test's limit.
      // A one-minute heartbeat (liveness window 3 min): on a loaded machine the starved service once
      // beat more than 15 s (the default window) before `status` read it, which then showed it dead.
      const svc = ServiceProcess.start('embedded', {
        RELAY_JOBS_DATA_DIR: dir,
        RELAY_JOBS_HTTP_PORT: port,
        RELAY_JOBS__JOBS__CANARY__SLEEP: '100ms',
        RELAY_JOBS__SHUTDOWN__GRACE: '10m',
        RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: '1m',
      });
      try {
        await svc.waitForLine(/relay-jobs started/);
        // Independent children run side by side: the refused second start with the `run`, then the
        // read-only views of the state that `run` left.
        // Port 0 (any free port): its port check always passes, so the refusal is the data directory's
        // (a port handed out here can still be taken by another test process's child meanwhile).
        const [second, run] = await Promise.all([
          runCli(['start'], { RELAY_JOBS_DATA_DIR: dir, RELAY_JOBS_HTTP_PORT: '0' }),
          runCli(['run', 'canary'], { RELAY_JOBS_DATA_DIR: dir, RELAY_JOBS_HTTP_PORT: port }),
        ]);
        expectUserError(expect, second, /is in use by another relay-jobs process \(pid \d+, http port \d+\)/);
        expect(run.code).toBe(0);
        expect(JSON.parse(run.stdout)).toEqual({ job: 'canary', run_id: expect.any(Number), fencing_token: expect.any(Number), status: 'ok', items: 1, note: expect.any(String), error: null });
        const [jobs, table, sql, status] = await Promise.all([
          runCli(['jobs', '--json'], { RELAY_JOBS_DATA_DIR: dir }),
          runCli(['jobs'], { RELAY_JOBS_DATA_DIR: dir }),
          runCli(['sql', `SELECT job_name, status FROM job_runs WHERE job_name = 'canary'`, '--json'], { RELAY_JOBS_DATA_DIR: dir }),
          runCli(['status'], { RELAY_JOBS_DATA_DIR: dir }),
        ]);
        // `jobs` and `status` show the live state, through the service that owns the data directory, in the API's words.
        expect(jobs.code, jobs.stderr).toBe(0);
        const canary = (JSON.parse(jobs.stdout) as Array<Record<string, unknown>>).find((j) => j.name === 'canary');
        expect(canary).toMatchObject({ health: expect.any(String), last_run: { status: 'ok' }, schedule: { every: '1m' } });
        expect((JSON.parse(jobs.stdout) as Array<{ name: string; next_attempt: string | null }>).find((j) => j.name === 'session_cleanup')!.next_attempt).toMatch(/^\d{4}-/);
        expect(table.stdout).toMatch(/^JOB\s+ENABLED\s+SCOPE\s+SCHEDULE\s+HEALTH\s+WORST_INSTANCE\s+LAST_RUN\s+NEXT_ATTEMPT/);
        // Embedded mode's SQL while the service owns PGlite: through its admin API, read-only.
        expect(sql.code, sql.stderr).toBe(0);
        expect(JSON.parse(sql.stdout)).toEqual([{ job_name: 'canary', status: 'ok' }]);
        expect(status.stdout).toMatch(/instances: 1 alive of 1 known/);
        expect(status.stdout).toMatch(/^embedded\s+true\s+/m);
        // Pause, a refused run and resume go through the service too, in the words the CLI uses without one.
        const env = { RELAY_JOBS_DATA_DIR: dir };
        const paused = await runCli(['jobs', 'pause', 'canary', '--reason', 'cli test'], env);
        expect(paused.code, paused.stderr).toBe(0);
        expect(paused.stdout).toMatch(/^job canary paused by admin token at \d{4}-\S+Z: cli test\n$/);
        const refused = await runCli(['run', 'canary'], env);
        expect(refused.code, refused.stderr).toBe(3);
        expect(JSON.parse(refused.stdout)).toMatchObject({
          status: 'not_started',
          note: expect.stringMatching(/^job canary is paused by admin token at \S+: cli test; `relay-jobs jobs resume canary`, or run it anyway with --force$/),
        });
        const resumed = await runCli(['jobs', 'resume', 'canary'], env);
        expect(resumed.code, resumed.stderr).toBe(0);
        expect(resumed.stdout).toMatch(/^job canary resumed \(was paused by admin token at \S+: cli test\)\n$/);
      } finally {
        svc.proc.kill('SIGTERM');
        expect(await svc.exitedWithin()).toBe(0);
      }
      expect(svc.lines.some((l) => /shutdown complete/.test(l))).toBe(true);
      // Every log line is one JSON object.
      for (const l of svc.lines.filter((x) => x.trim())) expect(() => JSON.parse(l)).not.toThrow();
      // The data dir is free again, and the migrations applied above are not applied twice.
      const again = await runCli(['migrate'], { RELAY_JOBS_DATA_DIR: dir });
      expect(again.code, again.stderr).toBe(0);
      expect(again.stdout).toMatch(/up to date/);
    },
  );

  // signals during start-up
  it.sequential('SIGTERM while the service is still starting ends it cleanly with exit 0', async ({ expect }) => {
    const dir = embeddedDataDir(undefined, { migrated: false }); // migrations still to apply: the stop lands inside start-up
    const svc = ServiceProcess.start('early', { RELAY_JOBS_DATA_DIR: dir, RELAY_JOBS_HTTP_PORT: String(await freePort()) });
    await svc.waitForLine(/migrations applied/); // inside Runtime.create, before the HTTP server exists
    svc.proc.kill('SIGTERM');
    expect(await svc.exitedWithin()).toBe(0);
    expect(svc.lines.join('\n')).toMatch(/shutdown complete/);
  });
});

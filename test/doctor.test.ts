import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { Redis } from 'ioredis';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../src/app/config-schema.js';
import { type Config } from '../src/config/load.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { buildJobs } from '../src/app/registry.js';
import type { Db } from '../src/store/db.js';
import { CHECKS, Doctor, exitCode, renderReport, type CheckResult, type DoctorReport } from '../src/areas/doctor/index.js';
import { outcomeOf } from './helpers/rounds.js';
import { runCli } from './helpers/cli.js';
import { PG_ADMIN_URL, PrivateRedis, REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, roleConnection, uniqueName } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { waitFor } from './helpers/wait.js';

const ADMIN = 'doctor-test-admin-token-Xq81-zzP0';

/**
 * One check per issue-27 rule, each made to `fail` for real and then `ok` again, against a real
 * PostgreSQL (a database of its own), the shared Redis (read only: INFO, SCAN) and a private Redis
 * (the only one whose CONFIG is changed). One runtime; most checks run in-process with a config
 * or a connection swapped in.
 */
describe('relay-jobs doctor (cluster)', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let prefix: string;
  let backupDir: string;
  let env: Record<string, string>;
  let config: Config;
  let rt: Runtime;
  let http: FastifyInstance;
  let second: PrivateRedis;

  const cfg = (extra: Record<string, string> = {}) => loadConfig({ env: { ...env, ...extra } });
  /** The checks named, run with `extra` config (jobs rebuilt from it) on the runtime's connections unless others are given. */
  const check = async (name: string, extra: Record<string, string> = {}, over: { db?: Db; redis?: Redis; replica?: boolean } = {}): Promise<CheckResult> => {
    const c = cfg(extra);
    const jobs = buildJobs(c);
    const d = new Doctor(
      {
        config: c,
        db: over.db ?? rt.db,
        redis: over.redis ?? rt.redis,
        clock: rt.clock,
        jobs: () => jobs,
        instances: () => rt.instances(),
        replica: () => over.replica ?? true,
        breakers: () => [],
        backupDir,
      },
      CHECKS.filter((x) => x.name === name),
    );
    const r = (await d.run()).checks[0]!;
    expect(r.name).toBe(name);
    return r;
  };

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    prefix = uniqueName('rjdoc');
    backupDir = await mkdtemp(join(tmpdir(), 'rj-doctor-backups-'));
    env = {
      DATABASE_URL: fresh.url,
      REDIS_URL,
      RELAY_JOBS_INSTANCE_ID: 'main',
      RELAY_JOBS_ENV: 'test',
      RELAY_JOBS_ADMIN_TOKEN: ADMIN,
      RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
      RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
      RELAY_JOBS__DATABASE__POOL_SIZE: '8',
      RELAY_JOBS__BACKUP__DIR: backupDir,
    };
    config = cfg();
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    await http.ready();
    second = await PrivateRedis.start();
  });
  afterAll(async () => {
    await http?.close();
    await rt?.shutdown();
    await second?.stop();
    await dropRedisPrefix(prefix);
    await fresh?.drop();
    await rm(backupDir, { recursive: true, force: true });
  });

  it('every check runs (none errors), and the API gives the same report with exit-code semantics', async () => {
    const res = await http.inject({ method: 'GET', url: '/api/v1/doctor', headers: { authorization: `Bearer ${ADMIN}` } });
    expect(res.statusCode).toBe(200);
    const report = res.json<DoctorReport & { recorded: unknown[] }>();
    expect(report.checks.map((c) => c.name)).toEqual(CHECKS.map((c) => c.name));
    for (const c of report.checks) {
      expect(c.measured, c.name).not.toMatch(/could not run/);
      expect(['ok', 'warn', 'fail']).toContain(c.status);
      expect(c.fix.length, `${c.name} names a fix`).toBeGreaterThan(10);
    }
    expect(report.status).toBe('fail'); // the test role is a superuser, the pool is 8
    expect(exitCode(report.status)).toBe(2);
    expect(exitCode('warn')).toBe(1);
    expect(exitCode('ok')).toBe(0);
    expect((await http.inject({ method: 'GET', url: '/api/v1/doctor' })).statusCode).toBe(401);
  });

  it('same_backends: a replica on a second Redis is fail, named; ok again once it stops', async () => {
    expect((await check('same_backends')).status).toBe('ok');
    const stray = await Runtime.create(loadConfig({ env: { ...env, REDIS_URL: second.url, RELAY_JOBS_INSTANCE_ID: 'stray' } }), { logger: silentLogger() });
    try {
      const r = await check('same_backends');
      expect(r.status).toBe('fail');
      expect(r.measured).toMatch(/replica stray is on Redis run_id/);
      expect(r.fix).toMatch(/REDIS_URL/);
    } finally {
      await stray.shutdown();
    }
    expect((await check('same_backends')).status).toBe('ok');
  });

  it('a one-shot command (`relay-jobs doctor`, not a replica) counts the replicas beating, never itself', async () => {
    // One replica beats: 'main'. A command runs under an id of its own (relay-jobs doctor: main-cli-<pid>); a
    // library's register: false runtime may even share main's id, and still counts main once, from its beat.
    for (const [id, replica] of [
      ['cli-host-1', false],
      ['main', false],
      ['main', true],
    ] as const) {
      const over = { replica };
      const extra = { RELAY_JOBS_INSTANCE_ID: id };
      expect((await check('same_backends', extra, over)).measured, `${id} replica=${replica}`).toMatch(/^1 live replica\(s\) on /);
      expect((await check('clock_skew', extra, over)).measured, `${id} replica=${replica}`).toMatch(/^1 live replica\(s\)[ ,]/);
      expect((await check('connection_budget', extra, over)).measured, `${id} replica=${replica}`).toMatch(/^1 live replica\(s\) can open 10 connections/);
    }
  });

  it('relay-jobs doctor with no instance id: runs as <host>-cli-<pid> and counts the one replica beating, not itself', async () => {
    const { RELAY_JOBS_INSTANCE_ID: _replicaId, ...commandEnv } = env;
    const r = await runCli(['doctor', '--json'], commandEnv);
    const report = JSON.parse(r.stdout) as DoctorReport;
    expect(report.instance_id).toMatch(/^.+-cli-\d+$/);
    const measured = (name: string) => report.checks.find((c) => c.name === name)?.measured;
    expect(measured('same_backends')).toMatch(/^1 live replica\(s\) on /);
    expect(measured('clock_skew')).toMatch(/^1 live replica\(s\).*, this host -?\d+ms \(not a replica\)/);
    expect(measured('connection_budget')).toMatch(/^1 live replica\(s\) can open 10 connections/);
  });

  it('redis_eviction: maxmemory-policy allkeys-lru (a private Redis) is fail; noeviction is ok', async () => {
    const r = new Redis(second.url);
    try {
      await r.config('SET', 'maxmemory-policy', 'allkeys-lru');
      const bad = await check('redis_eviction', {}, { redis: r });
      expect(bad.status).toBe('fail');
      expect(bad.measured).toMatch(/allkeys-lru/);
      expect(bad.fix).toMatch(/noeviction/);
      await r.config('SET', 'maxmemory-policy', 'noeviction');
      expect((await check('redis_eviction', {}, { redis: r })).status).toBe('ok');
    } finally {
      r.disconnect();
    }
  });

  it('pool_budget: a pool of 2 with all default jobs is fail; a pool sized for the busiest second is ok', async () => {
    const bad = await check('pool_budget', { RELAY_JOBS__DATABASE__POOL_SIZE: '2' });
    expect(bad.status).toBe('fail');
    expect(bad.measured).toMatch(/busiest second \d\d:\d\d:\d\d UTC: \d+ cluster round/);
    const need = Number(/at least (\d+)/.exec(bad.fix)![1]);
    expect(need).toBeGreaterThan(2);
    expect((await check('pool_budget', { RELAY_JOBS__DATABASE__POOL_SIZE: String(need) })).status).toBe('ok');
  });

  it('autovacuum: off on a churned table with dead tuples is fail; reset and vacuumed is ok', async () => {
    const admin = new pg.Client({ connectionString: fresh.url });
    await admin.connect();
    try {
      await admin.query('ALTER TABLE canary_runs SET (autovacuum_enabled = off)');
      await admin.query(`INSERT INTO canary_runs (slot, instance_id, fencing_token, phase) SELECT now(), 'x', g, 'start' FROM generate_series(1, 3000) g`);
      await admin.query('DELETE FROM canary_runs');
      // A backend hands its table statistics over when it goes idle, at most once a second: the DELETE's
      // comes within a second of the INSERT's, so PostgreSQL defers it by PGSTAT_IDLE_INTERVAL (10 s),
      // and by 10 s more each time the entry's lock is busy (measured here: 10.0 s every time, which a
      // loaded CI stretched past 20 s). pg_stat_force_next_flush() (PostgreSQL 15) makes the next flush
      // happen at once and wait for the lock (measured: 1–14 ms, with 8 sessions reading the statistics).
      await admin.query('SELECT pg_stat_force_next_flush()');
      let r = await waitFor(
        async () => {
          const c = await check('autovacuum');
          return /canary_runs: autovacuum_enabled = off with \d+ dead/.test(c.measured) ? c : null;
        },
        { what: 'the dead tuples in the statistics', intervalMs: 200, timeoutMs: 20_000 },
      );
      expect(r.status).toBe('fail');
      expect(r.measured).toMatch(/canary_runs: autovacuum_enabled = off with \d+ dead tuples/);
      expect(r.fix).toMatch(/RESET \(autovacuum_enabled\)/);
      await admin.query('ALTER TABLE canary_runs RESET (autovacuum_enabled)');
      await admin.query('VACUUM canary_runs');
      r = await waitFor(
        async () => {
          const c = await check('autovacuum');
          return c.status === 'ok' ? c : null;
        },
        { what: () => `the autovacuum check ok after the VACUUM`, intervalMs: 200, timeoutMs: 20_000 },
      );
      expect(r).toMatchObject({ status: 'ok' });
    } finally {
      await admin.end();
    }
  });

  it('restore_drill: backup.verify on with a service role that may not create databases is fail naming the grant; verify off, or a role that may, is not', async () => {
    const { role, db: limited, drop } = await roleConnection(fresh.url);
    try {
      const bad = await check('restore_drill', {}, { db: limited });
      expect(bad.status).toBe('fail');
      expect(bad.measured).toBe(`backup.verify is on, but the service's role ${role} may not create databases: every backup's verification fails (verify_failed) and no drill is recorded`);
      expect(bad.fix).toContain(`ALTER ROLE ${role} CREATEDB`);
      expect((await check('restore_drill', { RELAY_JOBS__BACKUP__VERIFY: 'false' }, { db: limited })).measured).not.toMatch(/may not create databases/);
      expect((await check('restore_drill', { RELAY_JOBS__JOBS__BACKUP__ENABLED: 'false' }, { db: limited })).measured).not.toMatch(/may not create databases/);
      expect((await check('restore_drill')).measured).not.toMatch(/may not create databases/); // the tests' role is a superuser
    } finally {
      await drop();
    }
  });

  it('retention_order: raw usage kept shorter than the aggregation lookback is fail; the defaults are ok', async () => {
    const bad = await check('retention_order', { RELAY_JOBS__USAGE__RETENTION: '1h' });
    expect(bad.status).toBe('fail');
    expect(bad.measured).toMatch(/usage\.retention 1h is not longer than usage\.lookback/);
    expect(bad.fix).toMatch(/raise usage\.retention/);
    expect((await check('retention_order')).status).toBe('ok');
  });

  it('refresh_margin: fail when even squeezed retries do not fit, warn when the schedule does not, ok at the defaults', async () => {
    // The defaults (the seed's 300 s margin) pass, as `config check` says (it warns with the same schedule).
    expect((await check('refresh_margin')).status).toBe('ok');
    const squeezing = await check('refresh_margin', { RELAY_JOBS__AUTH__REFRESH_MARGIN_SECONDS: '100' });
    expect(squeezing.status).toBe('warn');
    expect(squeezing.measured).toMatch(/vs the retry schedule 4m \(.*\) plus up to 75s of requests/);
    const bad = await check('refresh_margin', { RELAY_JOBS__AUTH__REFRESH_MARGIN_SECONDS: '10' });
    expect(bad.status).toBe('fail');
    expect(bad.fix).toMatch(/auth\.refresh_margin_seconds/);
    const need = Number(/at least (\d+)/.exec(bad.fix)![1]);
    expect((await check('refresh_margin', { RELAY_JOBS__AUTH__REFRESH_MARGIN_SECONDS: String(need) })).status).toBe('ok');
  });

  it("sql_console_role: the console's role (sql.database_url, else DATABASE_URL) as a superuser is fail; a role without SUPERUSER is ok", async () => {
    const bad = await check('sql_console_role');
    expect(bad.status).toBe('fail'); // the tests connect as postgres
    expect(bad.fix).toMatch(/sql\.database_url/);
    const role = uniqueName('rj_doctor_role');
    const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
    await admin.connect();
    await admin.query(`CREATE ROLE ${role} LOGIN NOSUPERUSER`);
    const url = new URL(fresh.url);
    url.username = role;
    try {
      const good = await check('sql_console_role', { RELAY_JOBS__SQL__DATABASE_URL: url.toString() });
      expect(good.status, good.measured).toBe('ok');
      expect(good.measured).toContain(role);
    } finally {
      await admin.query(`DROP ROLE ${role}`);
      await admin.end();
    }
  });

  it('backup_permissions: a world-readable backup file is fail; chmod 600 is ok; the doctor job raises and resolves an ops alert event', async () => {
    const file = join(backupDir, 'relay-jobs-test.dump.gz');
    await writeFile(file, 'not really a dump');
    await chmod(file, 0o644);
    const bad = await check('backup_permissions');
    expect(bad.status).toBe('fail');
    expect(bad.measured).toMatch(/relay-jobs-test\.dump\.gz \(644\)/);

    // The scheduled job: records every check, sets the metric, fires an event through the ops alert path.
    expect(outcomeOf(await rt.runNow('doctor'))?.status).toBe('ok');
    const events = async () =>
      (
        await rt.db.query<{ series: string; state: string; rule_name: string; labels: Record<string, string> }>(
          `SELECT series, state, rule_name, labels FROM ops_alert_events WHERE rule_name = 'doctor' ORDER BY id`,
        )
      ).rows;
    expect((await events()).find((e) => e.series === 'check:backup_permissions')).toMatchObject({ state: 'firing', labels: { check: 'backup_permissions', group: 'backups' } });
    const recorded = (await rt.db.query<{ name: string; status: string }>(`SELECT name, status FROM doctor_checks`)).rows;
    expect(recorded.find((x) => x.name === 'backup_permissions')?.status).toBe('fail');
    const metric = await rt.metrics.registry.getSingleMetricAsString('relay_jobs_doctor_check');
    expect(metric).toMatch(/relay_jobs_doctor_check\{check="backup_permissions",status="fail"\} 1/);
    // A second round with the check still failing fires nothing new (one open event per check).
    expect(outcomeOf(await rt.runNow('doctor'))?.status).toBe('ok');
    expect((await events()).filter((e) => e.series === 'check:backup_permissions')).toHaveLength(1);

    await chmod(file, 0o600);
    expect((await check('backup_permissions')).status).toBe('ok');
    expect(outcomeOf(await rt.runNow('doctor'))?.status).toBe('ok');
    expect((await events()).find((e) => e.series === 'check:backup_permissions')?.state).toBe('resolved');
    expect(await rt.metrics.registry.getSingleMetricAsString('relay_jobs_doctor_check')).toMatch(/relay_jobs_doctor_check\{check="backup_permissions",status="ok"\} 1/);
    // The evaluator leaves the doctor's rule alone (it has no series to fold).
    expect(['ok', 'no_work']).toContain(outcomeOf(await rt.runNow('ops_alert_evaluator'))?.status);
    expect((await events()).filter((e) => e.state === 'firing').map((e) => e.series)).not.toContain('check:backup_permissions');
    expect((await events()).filter((e) => e.state === 'firing').length).toBeGreaterThan(0); // sql_console_role still fails here
  });
});

describe('relay-jobs doctor (embedded, the CLI)', () => {
  it('runs the checks that apply, prints JSON, and exits 0/1/2 by the worst status', async () => {
    const dir = embeddedDataDir(await mkdtemp(join(tmpdir(), 'rj-doctor-embedded-')));
    try {
      const r = await runCli(['doctor', '--json'], { RELAY_JOBS_DATA_DIR: dir, RELAY_JOBS_INSTANCE_ID: 'solo', RELAY_JOBS__HTTP__PORT: '0' });
      const report = JSON.parse(r.stdout) as DoctorReport;
      expect(report.mode).toBe('embedded');
      const names = report.checks.map((c) => c.name);
      expect(names).toEqual(expect.arrayContaining(['disk_headroom', 'retention_order', 'refresh_margin', 'backup_permissions', 'backup_age', 'data_dir_permissions', 'admin_token']));
      expect(names).not.toContain('same_backends');
      expect(names).not.toContain('pool_budget');
      for (const c of report.checks) expect(c.measured, c.name).not.toMatch(/could not run/);
      expect(r.code).toBe(exitCode(report.status));
      // The text form: one line per check, the fix under each one that is not ok.
      const text = renderReport(report);
      expect(text).toMatch(/^(ok|warn|fail) +disk_headroom +.+\d+(\.\d)?%/m);
      for (const c of report.checks.filter((x) => x.status !== 'ok')) expect(text).toContain(`fix: ${c.fix}`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

// The first hour on an embedded install (issue 52, point 7c and 7d): a service started on a port of
// its own (not http.port's 8080) is found by `backup` and `backups` the way every other command
// finds it, through the data directory's lock file; with a backup made, `relay-jobs doctor` passes
// (exit 0: no check that can never clear), and the restore drill it advises works in embedded mode.
// And the defaults pass the doctor's own pool_budget.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli, ServiceProcess } from './helpers/cli.js';
import { freePort } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { exitCode, type DoctorReport } from '../src/areas/doctor/index.js';
import { poolBudget } from '../src/areas/doctor/checks/pool.js';
import { loadConfig } from '../src/app/config-schema.js';
import { buildJobs, checkJobSections } from '../src/app/registry.js';
import type { DoctorContext } from '../src/areas/doctor/check.js';

describe('the defaults', () => {
  it('pass pool_budget: the busiest second with its loops fits database.pool_size', async () => {
    const config = loadConfig({
      env: { DATABASE_URL: 'postgres://relay@127.0.0.1:5432/relay', REDIS_URL: 'redis://127.0.0.1:6379', RELAY_JOBS_INSTANCE_ID: 'r1', RELAY_JOBS_ENV: 'defaults' },
      checkJobs: checkJobSections(),
    });
    const jobs = buildJobs(config);
    const day = Date.UTC(2026, 11, 5, 12);
    const r = await poolBudget.run({ jobs, config, nowMs: day } as unknown as DoctorContext);
    expect(r.status, r.measured).toBe('ok');
    // The same jobs with a pool of 10 (the old default) are still judged as before: a warning.
    const small = { ...config, database: { ...config.database, pool_size: 10 } };
    expect((await poolBudget.run({ jobs, config: small, nowMs: day } as unknown as DoctorContext)).status).toBe('warn');
  });
});

describe('an embedded service on a port of its own', () => {
  const dataDir = embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-first-hour-')));
  let service: ServiceProcess | undefined;
  afterAll(async () => {
    if (service && service.proc.exitCode === null) {
      service.proc.kill('SIGKILL');
      await service.exited;
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('backup and backups find it through the lock file; the doctor exits 0; the advised restore drill works', async () => {
    // No service yet: said at once, naming the data directory.
    const none = await runCli(['backups'], { RELAY_JOBS_DATA_DIR: dataDir });
    expect(none.code, none.stdout + none.stderr).toBe(2);
    expect(none.stderr).toContain(`no relay-jobs service is running on data directory ${dataDir}`);

    const port = await freePort();
    service = ServiceProcess.start('embedded', { RELAY_JOBS_DATA_DIR: dataDir, RELAY_JOBS_HTTP_PORT: String(port) });
    await service.waitForLine(/relay-jobs started: ready/);
    // The commands' environment names the data directory only: http.port is its default, 8080.
    const env = { RELAY_JOBS_DATA_DIR: dataDir };
    // The defaults stay on (this is a new user's first hour), so the daily 03:00 UTC backup may be
    // running when this asks: the answer then names it ("backup 8eb2a87b7ebf is already running on embedded"), and
    // asking again once it is done is what a user does.
    const made = await waitFor(
      async () => {
        const r = await runCli(['backup', '--wait'], env);
        return /backup \S+ is already running on /.test(r.stderr) ? null : r;
      },
      { what: 'a backup not refused as busy', timeoutMs: 120_000, intervalMs: 2000 },
    );
    expect(made.code, made.stdout + made.stderr).toBe(0);
    expect(made.stdout).toMatch(/backup \S+ completed/);
    const listed = await runCli(['backups', '--json'], env);
    expect(listed.code, listed.stderr).toBe(0);
    const backups = JSON.parse(listed.stdout) as Array<{ state: string; location: string }>;
    expect(backups.map((b) => b.state)).toContain('completed');

    const doctor = await runCli(['doctor', '--json'], env);
    const report = JSON.parse(doctor.stdout) as DoctorReport;
    expect(doctor.code).toBe(exitCode(report.status));
    const notOk = report.checks.filter((c) => c.status !== 'ok');
    // disk_headroom judges this machine's disk, not the install.
    expect(notOk.filter((c) => c.name !== 'disk_headroom').map((c) => `${c.name}: ${c.measured}`)).toEqual([]);
    if (!notOk.length) expect(doctor.code).toBe(0);
    const drill = report.checks.find((c) => c.name === 'restore_drill')!;
    expect(drill.fix).not.toMatch(/--target postgres/);
    expect(drill.fix).toContain(`relay-jobs restore ${backups[0]!.location} --target ./restore-drill`);

    // The advice, followed: the file restores into a new data directory.
    const target = join(dataDir, '..', `${dataDir.split('/').pop()}-drill`);
    try {
      const restored = await runCli(['restore', backups[0]!.location, '--target', target], env, 120_000);
      expect(restored.code, restored.stdout + restored.stderr).toBe(0);
    } finally {
      rmSync(target, { recursive: true, force: true });
    }

    service.proc.kill('SIGTERM');
    expect(await service.exitedWithin(60_000)).toBe(0);
  });
});

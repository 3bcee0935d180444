#!/usr/bin/env node
import { Command } from 'commander';
import { UserError } from '../config/errors.js';
import { loadConfig, type Config } from '../config/load.js';
import { formatDuration } from '../config/duration.js';
import { printConfig } from '../config/print.js';
import { buildJobs, checkJobSections } from '../jobs/registry.js';
import { VERSION } from '../version.js';
import { PRIVATE_UMASK } from '../store/data-dir-perms.js';
import { startService } from './start.js';
import { runJob } from './run.js';
import { migrateCommand } from './migrate.js';
import { opsStatus } from '../areas/ops/cli-ops-status.js';
import { backupCommand } from '../areas/backup/cli-backup.js';
import { backupsCommand } from '../areas/backup/cli-backups.js';
import { restoreCommand } from '../areas/backup/cli-restore.js';
import { sqlCommand } from '../areas/admin/cli-sql.js';
import { doctorCommand } from '../areas/doctor/cli-doctor.js';
import { jobsTable, readLiveView, scheduleText, statusText, table } from './live-view.js';

// Everything this process creates (embedded database, backups, spill files, objects) is for its own user only.
process.umask(PRIVATE_UMASK);

function config(cmd: Command): Config {
  const file = (cmd.optsWithGlobals() as { config?: string }).config;
  return loadConfig({ file, checkJobs: checkJobSections() });
}

const program = new Command()
  .name('relay-jobs')
  .description('Background jobs and multi-instance coordination for AI API relay gateways')
  .version(VERSION)
  .option('-c, --config <file>', 'YAML config file (default: $RELAY_JOBS_CONFIG)')
  .showHelpAfterError();

program
  .command('start')
  .description('run the service until SIGTERM/SIGINT (embedded mode unless DATABASE_URL and REDIS_URL are set)')
  .action(async (_opts, cmd: Command) => startService(config(cmd)));

program
  .command('migrate')
  .description('apply pending database migrations and exit')
  .action(async (_opts, cmd: Command) => migrateCommand(config(cmd)));

program
  .command('jobs')
  .description('list the jobs: schedule, health, last run and next attempt (the same fields as GET /api/v1/jobs)')
  .option('--json', 'print JSON')
  .option('--config-only', 'only what the configuration says, without reading the database')
  .action(async (opts: { json?: boolean; configOnly?: boolean }, cmd: Command) => {
    const cfg = config(cmd);
    if (opts.configOnly) {
      const jobs = buildJobs(cfg).map((j) => ({
        name: j.name,
        description: j.description,
        scope: j.scope,
        enabled: j.settings.enabled,
        // The same object as GET /api/v1/jobs: { every } or { cron, timezone }.
        schedule: j.settings.schedule.kind === 'every' ? { every: formatDuration(j.settings.schedule.everyMs) } : { cron: j.settings.schedule.expr, timezone: j.settings.schedule.timezone },
        timeout: formatDuration(j.settings.timeoutMs),
        lock_ttl: formatDuration(j.settings.lockTtlMs),
        jitter: formatDuration(j.settings.jitterMs),
      }));
      if (opts.json) return void process.stdout.write(JSON.stringify(jobs, null, 2) + '\n');
      return void process.stdout.write(
        table([
          ['JOB', 'ENABLED', 'SCOPE', 'SCHEDULE', 'TIMEOUT', 'LOCK_TTL', 'JITTER'],
          ...jobs.map((j) => [j.name, String(j.enabled), j.scope, scheduleText(j.schedule), j.timeout, j.lock_ttl, j.jitter]),
        ]),
      );
    }
    const { jobs } = await readLiveView(cfg);
    process.stdout.write(opts.json ? JSON.stringify(jobs, null, 2) + '\n' : jobsTable(jobs));
  });

program
  .command('status')
  .description("the instances (alive, host, pid, heartbeat) and the jobs' health, as the API reports them")
  .option('--json', 'print JSON')
  .action(async (opts: { json?: boolean }, cmd: Command) => {
    const view = await readLiveView(config(cmd));
    process.stdout.write(opts.json ? JSON.stringify(view, null, 2) + '\n' : statusText(view));
  });

program
  .command('sql <query>')
  .description("run one read-only SQL statement against the service's database (embedded mode too, while the service runs)")
  .option('--json', 'print the rows as JSON')
  .action(async (query: string, opts: { json?: boolean }, cmd: Command) => sqlCommand(config(cmd), query, Boolean(opts.json)));

program
  .command('run <job>')
  .description('run one round of a job now, through the same lock and slot claim, and print the outcome')
  .action(async (job: string, _opts, cmd: Command) => {
    process.exitCode = await runJob(config(cmd), job);
  });

program
  .command('backup')
  .description('ask the running service for a backup now')
  .option('--wait', 'wait for it to finish; exit 1 unless it is good')
  .option('--url <url>', 'the service (default http://127.0.0.1:<http.port>)')
  .action(async (opts: { wait?: boolean; url?: string }, cmd: Command) => void (process.exitCode = await backupCommand(config(cmd), opts)));
program
  .command('backups')
  .description('list backups with state, size, duration, checksum and instance')
  .option('--json', 'print JSON')
  .option('--url <url>', 'the service (default http://127.0.0.1:<http.port>)')
  .action(async (opts: { json?: boolean; url?: string }, cmd: Command) => backupsCommand(config(cmd), opts));
program
  .command('restore <source>')
  .description('restore a backup (id, file or s3:// URI) into an empty database')
  .requiredOption('--target <url>', 'the database to restore into (postgres://...)')
  .option('--force', 'empty a non-empty target first')
  .action(async (source: string, opts: { target: string; force?: boolean }, cmd: Command) => restoreCommand(config(cmd), source, opts));

program
  .command('ops')
  .description('the operations plane')
  .command('status')
  .description('print the ops overview: health score and its parts, firing alerts, jobs by health, instances (exit 1 when the score is under 50)')
  .option('--json', 'print JSON')
  .action(async (opts: { json?: boolean }, cmd: Command) => {
    process.exitCode = await opsStatus(config(cmd), Boolean(opts.json));
  });

program
  .command('doctor')
  .description(
    'check the live deployment against the operating rules (same backends, Redis eviction, clocks, pool budget, autovacuum, retention order, refresh margin, backups, security); exit 0 ok, 1 warn, 2 fail',
  )
  .option('--json', 'print JSON')
  .action(async (opts: { json?: boolean }, cmd: Command) => {
    process.exitCode = await doctorCommand(config(cmd), Boolean(opts.json));
  });

program
  .command('config')
  .description('configuration commands')
  .command('check')
  .description('validate the configuration (file, env, RELAY_JOBS__* overrides) and exit')
  .option('--print', 'print the effective configuration, secrets redacted')
  .action((opts: { print?: boolean }, cmd: Command) => {
    const cfg = config(cmd);
    const jobs = buildJobs(cfg);
    const enabled = jobs.filter((j) => j.settings.enabled).map((j) => j.name);
    for (const w of cfg.warnings) process.stderr.write(`relay-jobs: warning: ${w}\n`);
    // With --print the summary is a YAML comment: the whole output is a config file.
    process.stdout.write(`${opts.print ? '# ' : ''}config ok: ${cfg.mode} mode, instance ${cfg.instance.id}, env ${cfg.instance.env}, jobs enabled: ${enabled.join(', ') || 'none'}\n`);
    // YAML in the config's own form (durations as `20s`, no derived keys), so the output loads back as the same configuration.
    if (opts.print) process.stdout.write(printConfig(cfg));
  });

program.parseAsync(process.argv).catch((err: unknown) => {
  if (err instanceof UserError) {
    process.stderr.write(`relay-jobs: ${err.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`relay-jobs: unexpected error: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exit(1);
});

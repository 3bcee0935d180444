#!/usr/bin/env node
import { setFlagsFromString } from 'node:v8';
import { Command, CommanderError } from 'commander';
import { UserError } from '../config/errors.js';
import { VERSION } from '../version.js';
import { PRIVATE_UMASK } from '../store/data-dir-perms.js';
import { cliContext } from './cli-context.js';

// Everything this process creates (embedded database, backups, spill files, objects) is for its own user only.
process.umask(PRIVATE_UMASK);

// Each action imports the code it runs: `relay-jobs --version` loads a handful of modules, and a
// command loads only what it needs (the runtime only for the commands that open one).
const config = (cmd: Command) => cliContext.config(cmd);

const program = new Command()
  .name('relay-jobs')
  .description('Background jobs and multi-instance coordination for AI API relay gateways')
  .version(VERSION)
  .option('-c, --config <file>', 'YAML config file (default: $RELAY_JOBS_CONFIG)')
  // A mistyped command or option is a user error (exit 2, as a bad config is): exit 1 means a
  // result (a failed round, a doctor warning), which a script must not mistake a typo for.
  .showHelpAfterError('(relay-jobs --help lists the commands; relay-jobs <command> --help its options)')
  .exitOverride()
  .configureOutput({ outputError: (text, write) => write(`relay-jobs: ${text}`) });

program
  .command('start')
  .description('run the service until SIGTERM/SIGINT (embedded mode unless DATABASE_URL and REDIS_URL are set)')
  .action(async (_opts, cmd: Command) => (await import('./start.js')).startService(await config(cmd)));

program
  .command('migrate')
  .description('apply pending database migrations and exit')
  .action(async (_opts, cmd: Command) => (await import('./migrate.js')).migrateCommand(await config(cmd)));

const jobsCommand = program
  .command('jobs')
  .description('list the jobs: schedule, health, last run and next attempt (the same fields as GET /api/v1/jobs); `jobs pause|resume <job>`')
  .option('--json', 'print JSON')
  .option('--config-only', 'only what the configuration says, without reading the database')
  .action(async (opts: { json?: boolean; configOnly?: boolean }, cmd: Command) => {
    const cfg = await config(cmd);
    const [{ buildJobs }, { formatDuration }, { jobsTable, readLiveView, scheduleText, table }] = await Promise.all([
      import('../app/registry.js'),
      import('../config/duration.js'),
      import('./live-view.js'),
    ]);
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

// Subcommands of `jobs` (issue 49): `jobs` alone still lists; `jobs pause|resume <job>` dispatch here.
// A `--json` after the subcommand is parsed by `jobs` (its own option), so the actions read it with the parent's.
jobsCommand
  .command('pause <job>')
  .description('pause a job cluster-wide (persisted): a running round finishes, no new round starts on any replica until resumed')
  .option('-r, --reason <text>', 'why (required; 1-500 characters), kept with the pause and in the audit')
  .option('--json', 'print JSON')
  .action(async (job: string, opts: { reason?: string; json?: boolean }, cmd: Command) => {
    process.exitCode = await (await import('./pause.js')).pauseCommand(await config(cmd), 'pause', job, { ...opts, json: cmd.optsWithGlobals<{ json?: boolean }>().json });
  });
jobsCommand
  .command('resume <job>')
  .description('resume a paused job: its next slot runs as scheduled')
  .option('-r, --reason <text>', 'why (optional), kept in the audit')
  .option('--json', 'print JSON')
  .action(async (job: string, opts: { reason?: string; json?: boolean }, cmd: Command) => {
    process.exitCode = await (await import('./pause.js')).pauseCommand(await config(cmd), 'resume', job, { ...opts, json: cmd.optsWithGlobals<{ json?: boolean }>().json });
  });

program
  .command('status')
  .description("the instances (alive, host, pid, heartbeat) and the jobs' health, as the API reports them")
  .option('--json', 'print JSON')
  .action(async (opts: { json?: boolean }, cmd: Command) => {
    const { readLiveView, statusText } = await import('./live-view.js');
    const view = await readLiveView(await config(cmd));
    process.stdout.write(opts.json ? JSON.stringify(view, null, 2) + '\n' : statusText(view));
  });

program
  .command('run <job>')
  .description('run one round of a job now, through the same lock and slot claim, and print the outcome')
  .option('--force', 'run even while the job is paused (the pause stays)')
  .action(async (job: string, opts: { force?: boolean }, cmd: Command) => {
    process.exitCode = await (await import('./run.js')).runJob(await config(cmd), job, { force: opts.force === true });
  });

program
  .command('config')
  .description('configuration commands')
  .command('check')
  .description('validate the configuration (file, env, RELAY_JOBS__* overrides) and exit')
  .option('--print', 'print the effective configuration, secrets redacted')
  .action(async (opts: { print?: boolean }, cmd: Command) => {
    const cfg = await config(cmd);
    const [{ buildJobs }, { printConfig }] = await Promise.all([import('../app/registry.js'), import('../app/config-schema.js')]);
    const jobs = buildJobs(cfg);
    const enabled = jobs.filter((j) => j.settings.enabled).map((j) => j.name);
    for (const w of cfg.warnings) process.stderr.write(`relay-jobs: warning: ${w}\n`);
    // With --print the summary is a YAML comment: the whole output is a config file.
    process.stdout.write(`${opts.print ? '# ' : ''}config ok: ${cfg.mode} mode, instance ${cfg.instance.id}, env ${cfg.instance.env}, jobs enabled: ${enabled.join(', ') || 'none'}\n`);
    // YAML in the config's own form (durations as `20s`, no derived keys), so the output loads back as the same configuration.
    if (opts.print) process.stdout.write(printConfig(cfg));
  });

/** The command word of argv (the first argument that is not an option or an option's value). */
function commandWord(argv: readonly string[]): string | undefined {
  const args = argv.slice(2);
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '-c' || args[i] === '--config') i++;
    else if (!args[i]!.startsWith('-')) return args[i];
  }
  return undefined;
}

/**
 * The areas' commands (app/registry.ts), added unless the command word is the kernel's own:
 * `--help`, `help` and an area's command read the area list; `start` or `--version` never do.
 */
async function withAreaCommands(argv: readonly string[]): Promise<void> {
  const word = commandWord(argv);
  const kernel = program.commands.map((c) => c.name());
  if (argv.includes('-V') || argv.includes('--version') || (word !== undefined && kernel.includes(word))) return;
  const { AREAS } = await import('../app/registry.js');
  for (const area of AREAS) for (const c of area.cli ?? []) c.register(program, cliContext);
}

// A one-shot command lives for seconds: V8's background optimisation (TurboFan tier-up) of PGlite's
// and the SQL parser's WebAssembly costs it more CPU than it ever wins back. Measured in embedded
// mode, `relay-jobs jobs`: 3.2 CPU s and 2.2 s without this, 1.9 CPU s and 1.6 s with it. `start`
// keeps the optimising tier: a service runs for days. Set before anything compiles WebAssembly
// (PGlite and the parser are imported on first use), and process-wide (worker threads too).
program.hook('preAction', (_program, action) => {
  if (action.name() !== 'start') setFlagsFromString('--liftoff-only');
});

withAreaCommands(process.argv)
  .then(() => program.parseAsync(process.argv))
  .catch((err: unknown) => {
    // Commander has printed its message (and the help, when asked for): help and --version exit 0, a usage error 2.
    if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : 2);
    if (err instanceof UserError) {
      process.stderr.write(`relay-jobs: ${err.message}\n`);
      process.exit(2);
    }
    process.stderr.write(`relay-jobs: unexpected error: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  });

import type { Command } from 'commander';
import { defineArea } from '../../modules/area.js';
import { backupConfig } from './config.js';
import { backupJob } from './backup.js';
import { registerBackupRoutes } from './backups-routes.js';
import { BackupMetrics } from './metrics.js';
import { backupMigrations } from './store/migrations/index.js';

const URL_HELP = "the service (default: embedded, the one holding the data directory's lock file, on its port; cluster, http://127.0.0.1:<http.port>)";

/** The backup area as the area list sees it (README.md: its invariants). */
export const backupArea = defineArea({
  name: 'backup',
  config: backupConfig,
  migrations: backupMigrations,
  wiring: async () => (await import('./wiring.js')).buildBackup,
  jobs: [backupJob],
  metrics: [BackupMetrics],
  routes: (api, deps) => registerBackupRoutes(api, deps),
  cli: [
    {
      name: 'backup',
      register: (program: Command, cli) =>
        program
          .command('backup')
          .description('ask the running service for a backup now')
          .option('--wait', 'wait for it to finish; exit 1 unless it is good')
          .option('--url <url>', URL_HELP)
          .action(async (opts: { wait?: boolean; url?: string }, cmd: Command) => void (process.exitCode = await (await import('./cli-backup.js')).backupCommand(await cli.config(cmd), opts))),
    },
    {
      name: 'backups',
      register: (program: Command, cli) =>
        program
          .command('backups')
          .description('list backups with state, size, duration, checksum and instance')
          .option('--json', 'print JSON')
          .option('--url <url>', URL_HELP)
          .action(async (opts: { json?: boolean; url?: string }, cmd: Command) => (await import('./cli-backups.js')).backupsCommand(await cli.config(cmd), opts)),
    },
    {
      name: 'restore',
      register: (program: Command, cli) =>
        program
          .command('restore <source>')
          .description('restore a backup (id, file or s3:// URI) into an empty database')
          .requiredOption('--target <url>', 'the database to restore into (postgres://...)')
          .option('--force', 'empty a non-empty target first')
          .action(async (source: string, opts: { target: string; force?: boolean }, cmd: Command) => (await import('./cli-restore.js')).restoreCommand(await cli.config(cmd), source, opts)),
    },
  ],
});

import type { Config } from '../../config/load.js';
import { backupStorage } from './wiring.js';
import { resolveSource } from './restore-source.js';
import { restore } from './restore.js';

/** `relay-jobs restore <backup-id|file|s3-uri> --target <DATABASE_URL> [--force]`. */
export async function restoreCommand(config: Config, source: string, opts: { target: string; force?: boolean }): Promise<void> {
  const src = await resolveSource(source, config, backupStorage);
  try {
    await restore({
      source: src,
      target: opts.target,
      force: Boolean(opts.force),
      livenessMs: config.cluster.instance_heartbeat * 3,
      connectTimeoutMs: config.database.connect_timeout,
      binDir: config.backup.pg_bin_dir,
      out: (line) => process.stdout.write(`${line}\n`),
    });
  } finally {
    src.close();
  }
}

import type { Config } from '../../config/load.js';
import { UserError } from '../../config/errors.js';
import type { BackupRecord } from './store/backups.js';
import { adminRequest, serviceUrl } from '../../cli/admin-client.js';
import { delay } from '../../time/wall.js';

const TERMINAL = new Set(['completed', 'verified', 'verify_failed', 'failed']);

/**
 * `relay-jobs backup [--wait]`: asks the running service for a backup; --wait follows it to its end (exit 1 unless good).
 * The service is found as every command finds it (cli/admin-client.ts `serviceUrl`: the data directory's lock file in
 * embedded mode), once, so the follow-up asks the service that started the backup.
 */
export async function backupCommand(config: Config, opts: { wait?: boolean; url?: string }): Promise<number> {
  const url = serviceUrl(config, opts.url);
  const r = await adminRequest<{ id?: string; error?: { message: string; running_id?: string } }>(config, url, 'POST', '/backups', {});
  if (r.status === 409) throw new UserError(`${r.body.error?.message ?? 'a backup is already running'}`);
  if (r.status !== 202 || !r.body.id) throw new UserError(`backup not started (HTTP ${r.status}): ${r.body.error?.message ?? 'no reason given'}`);
  const id = r.body.id;
  process.stdout.write(`backup ${id} started\n`);
  if (!opts.wait) return 0;
  let last = '';
  for (;;) {
    await delay(1000);
    const g = await adminRequest<{ backup?: BackupRecord }>(config, url, 'GET', `/backups/${id}`);
    const b = g.body.backup;
    if (!b) throw new UserError(`backup ${id} disappeared (HTTP ${g.status})`);
    if (b.state !== last) last = b.state;
    if (TERMINAL.has(b.state)) {
      const detail = b.error ?? b.verify_error;
      process.stdout.write(`backup ${id} ${b.state}${b.size_bytes !== null ? `: ${b.size_bytes} bytes, sha256 ${b.sha256}, ${b.location}` : ''}${detail ? ` (${detail})` : ''}\n`);
      return b.state === 'verified' || b.state === 'completed' ? 0 : 1;
    }
  }
}

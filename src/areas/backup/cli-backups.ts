import type { Config } from '../../config/load.js';
import { UserError } from '../../config/errors.js';
import type { BackupRecord } from './store/backups.js';
import { adminRequest } from '../../cli/admin-client.js';

/** `relay-jobs backups [--json]`: the backups with state, size, duration, checksum and who ran them, from the service `serviceUrl` finds (cli/admin-client.ts). */
export async function backupsCommand(config: Config, opts: { json?: boolean; url?: string }): Promise<void> {
  const r = await adminRequest<{ backups?: BackupRecord[]; error?: { message: string } }>(config, opts.url, 'GET', '/backups');
  if (r.status !== 200 || !r.body.backups) throw new UserError(`cannot list backups (HTTP ${r.status}): ${r.body.error?.message ?? ''}`);
  if (opts.json) {
    process.stdout.write(JSON.stringify(r.body.backups, null, 2) + '\n');
    return;
  }
  const rows = [
    ['ID', 'STATE', 'TRIGGER', 'STARTED', 'DURATION', 'SIZE', 'SHA256', 'INSTANCE', 'LOCATION'],
    ...r.body.backups.map((b) => [
      b.id,
      b.state,
      b.trigger,
      b.started_at,
      b.duration_ms === null ? '-' : `${(b.duration_ms / 1000).toFixed(1)}s`,
      b.size_bytes === null ? '-' : String(b.size_bytes),
      b.sha256 ? b.sha256.slice(0, 12) : '-',
      b.instance_id,
      b.location,
    ]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  for (const row of rows)
    process.stdout.write(
      row
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd() + '\n',
    );
}

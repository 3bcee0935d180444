import { createServer } from 'node:net';
import type { Config } from '../config/load.js';
import { UserError } from '../config/errors.js';
import { DataDirLock } from '../store/data-dir-lock.js';

/**
 * Checks that the HTTP port can be bound before anything slow or lasting happens (opening the
 * database, migrations, creating the data directory and the admin token): a port in use is the
 * most common first-start problem and should be reported in a second, not after fifteen.
 * A race with another process remains possible; the real listen reports it the same way.
 */
export async function checkPortFree(config: Config): Promise<void> {
  const { host, port } = config.http;
  if (port === 0) return;
  const probe = createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once('error', reject);
    probe.listen({ port, host, exclusive: true }, () => probe.close(() => resolve()));
  }).catch((err: NodeJS.ErrnoException) => {
    throw portError(config, err);
  });
}

export function portError(config: Config, err: NodeJS.ErrnoException): UserError {
  const { host, port } = config.http;
  const where = `${host}:${port} (RELAY_JOBS_HTTP_PORT)`;
  if (err.code === 'EADDRINUSE') {
    const owner = config.mode === 'embedded' ? DataDirLock.liveOwner(config.database.data_dir) : null;
    const who = owner ? `relay-jobs pid ${owner.pid} already runs on this data directory` : 'another process listens there';
    return new UserError(`cannot listen on ${where}: the port is in use (${who}); stop it or set RELAY_JOBS_HTTP_PORT to a free port`);
  }
  if (err.code === 'EACCES') return new UserError(`cannot listen on ${where}: permission denied (ports below 1024 need privileges); choose a port of 1024 or above`);
  if (err.code === 'EADDRNOTAVAIL') return new UserError(`cannot listen on ${where}: ${host} is not an address of this machine (http.host)`);
  return new UserError(`cannot listen on ${where}: ${err.message}`);
}

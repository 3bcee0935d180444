import type { Config } from '../../config/load.js';
import { UserError } from '../../config/errors.js';
import type { CliContext } from '../../modules/area.js';
import type { DoctorServices } from './wiring.js';
import { readEmbeddedAdminToken } from '../../app/admin-token.js';
import { DataDirLock } from '../../store/data-dir-lock.js';
import { exitCode, renderReport, type DoctorReport } from './index.js';

/**
 * `relay-jobs doctor [--json]`: every check against the live deployment, one line each (ok, warn
 * or fail, what was measured, the fix). Exit 0 when all are ok, 1 with a warning, 2 with a
 * failure. Connects like `relay-jobs ops status`; in embedded mode with a running service, asks
 * that service (it owns the data directory).
 */
export async function doctorCommand(config: Config, json: boolean, cli: CliContext): Promise<number> {
  const report = await fetchReport(cli, config);
  process.stdout.write(json ? JSON.stringify(report, null, 2) + '\n' : renderReport(report));
  return exitCode(report.status);
}

async function fetchReport(cli: CliContext, config: Config): Promise<DoctorReport> {
  if (config.mode === 'embedded') {
    const owner = DataDirLock.liveOwner(config.database.data_dir);
    if (owner) {
      const token = config.http.admin_token ?? readEmbeddedAdminToken(config.database.data_dir);
      if (!token) throw new UserError(`a relay-jobs service owns ${config.database.data_dir} but no admin token is available (set RELAY_JOBS_ADMIN_TOKEN)`);
      const res = await fetch(`http://127.0.0.1:${owner.http_port ?? config.http.port}/api/v1/doctor`, { headers: { authorization: `Bearer ${token}` } }).catch((err: Error) => {
        throw new UserError(`the service owning ${config.database.data_dir} did not answer: ${err.message}`);
      });
      if (!res.ok) throw new UserError(`the service answered HTTP ${res.status} to GET /api/v1/doctor`);
      const body = (await res.json()) as DoctorReport & { recorded?: unknown };
      delete body.recorded;
      return body;
    }
  }
  const rt = await cli.runtime<DoctorServices>(config);
  try {
    return await rt.services.doctor.run();
  } finally {
    await rt.shutdown('doctor report printed');
  }
}

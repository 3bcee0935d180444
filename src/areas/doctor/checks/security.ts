import { stat } from 'node:fs/promises';
import { combine, fail, ok, warn, type CheckOutcome, type DoctorCheck } from '../check.js';
import { PgDb } from '../../../store/pg-db.js';
import { consoleDatabaseUrl, inspectConsoleRole, reachFindings } from '../../admin/index.js';

const LOOPBACK = new Set(['localhost', '127.0.0.1', '::1', '[::1]']);

/** The admin token: set (cluster), long and varied enough to resist guessing. */
export const adminToken: DoctorCheck = {
  name: 'admin_token',
  group: 'security',
  modes: ['cluster', 'embedded'],
  async run({ config }) {
    const t = config.http.admin_token;
    const fix = 'set RELAY_JOBS_ADMIN_TOKEN to 32 or more random characters (openssl rand -base64 32)';
    if (!t) return config.mode === 'embedded' ? ok('generated admin token in the data directory', fix) : fail('RELAY_JOBS_ADMIN_TOKEN is not set: the admin API answers 401 to everyone', fix);
    const distinct = new Set(t).size;
    const classes = [/[a-z]/, /[A-Z]/, /[0-9]/, /[^A-Za-z0-9]/].filter((r) => r.test(t)).length;
    const measured = `${t.length} characters, ${distinct} distinct, ${classes} character class(es)`;
    if (t.length < 24 || distinct < 10 || classes < 2) return warn(`${measured}: guessable`, fix);
    return ok(measured, fix);
  },
};

/**
 * The SQL console's role: in cluster mode `POST /api/v1/sql` connects as `sql.database_url`'s role
 * (else DATABASE_URL's). It must read the service's own tables and nothing else: not a superuser
 * or a holder of the server-file/program roles (the console refuses those, and the tables' owner),
 * not pg_read_all_data, not pg_authid (every role's password hash), no CONNECT granted on another
 * database, no secret column (SECRET_COLUMNS, the list the documented recipe leaves out), no writes.
 */
export const sqlConsoleRole: DoctorCheck = {
  name: 'sql_console_role',
  group: 'security',
  modes: ['cluster'],
  async run({ config }) {
    const { url, source } = consoleDatabaseUrl(config);
    const key = config.sql.database_url ? 'sql.database_url' : 'DATABASE_URL (no sql.database_url)';
    const fix =
      'create a read-only role with the recipe in docs/security.md ("SQL console role": the service\'s tables only, secret columns left out) and set sql.database_url (RELAY_JOBS__SQL__DATABASE_URL) to connect as it';
    // Connected first, so an unreachable server is named with the key (and variable) its URL came from.
    const db = await PgDb.connect({ url, source, poolSize: 1, connectTimeoutMs: config.database.connect_timeout });
    try {
      const role = await db.tx((q) => inspectConsoleRole(q));
      const findings = reachFindings(role);
      if (findings.length) return fail(`the SQL console would connect as ${JSON.stringify(role.name)} (${key}): ${findings.join('; ')}`, fix);
      return ok(`the SQL console connects as ${JSON.stringify(role.name)} (${key}): no superuser, file rights, pg_read_all_data, pg_authid, other database, secret column or write`, fix);
    } finally {
      await db.close();
    }
  },
};

/** The data directory (embedded database, generated admin token, image files) is not open to other users. */
export const dataDirPermissions: DoctorCheck = {
  name: 'data_dir_permissions',
  group: 'security',
  modes: ['cluster', 'embedded'],
  async run({ config }) {
    const dir = config.database.data_dir;
    const s = await stat(dir).catch(() => null);
    const fix = `chmod 700 ${dir} (RELAY_JOBS_DATA_DIR) and run the service with umask 077`;
    if (!s) return ok(`${dir} does not exist${config.mode === 'cluster' ? ' (cluster mode keeps no data there)' : ''}`, fix);
    const mode = s.mode & 0o777;
    const measured = `${dir} mode ${mode.toString(8)}`;
    if (config.mode === 'embedded' && mode & 0o007) return fail(`${measured}: other users can reach the embedded database and the admin token`, fix);
    if (mode & 0o002) return fail(`${measured}: world-writable`, fix);
    if (mode & 0o005) return warn(`${measured}: readable by other users`, fix);
    return ok(measured, fix);
  },
};

/** TLS to the backends: where a URL asks for it, the connection must have it; a remote backend without it warns. */
export const backendTls: DoctorCheck = {
  name: 'backend_tls',
  group: 'security',
  modes: ['cluster'],
  async run({ config, facts }) {
    const findings: CheckOutcome[] = [];
    const pg = new URL(config.database.url!);
    const sslmode = pg.searchParams.get('sslmode') ?? (pg.searchParams.get('ssl') === 'true' ? 'require' : null);
    const ssl = await facts.ssl();
    const fixPg = 'add ?sslmode=verify-full to DATABASE_URL (and ssl = on on the server)';
    if (sslmode && sslmode !== 'disable' && sslmode !== 'prefer' && ssl === false) findings.push(fail(`DATABASE_URL asks for sslmode=${sslmode} but the connection is not encrypted`, fixPg));
    else if (!LOOPBACK.has(pg.hostname) && ssl === false) findings.push(warn(`PostgreSQL at ${pg.hostname} without TLS`, fixPg));
    const r = config.redis.url ? new URL(config.redis.url) : null;
    if (r && r.protocol === 'redis:' && !LOOPBACK.has(r.hostname)) findings.push(warn(`Redis at ${r.hostname} without TLS (redis://)`, 'use rediss:// in REDIS_URL with TLS on the Redis server'));
    return combine(findings, ok(`PostgreSQL ${ssl ? 'over TLS' : `on ${pg.hostname} (loopback)`}; Redis ${r?.protocol === 'rediss:' ? 'over TLS' : `on ${r?.hostname ?? '?'}`}`, fixPg));
  },
};

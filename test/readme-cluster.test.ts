// The README's cluster example, followed (issue 52, point 7e): its SQL creates the service's role
// (owner of its database, not a superuser) and the console's role; a replica runs as the first with
// `sql.database_url` on the second; the console grants (deploy/postgres/console-grants.sql, docs/security.md's recipe)
// run after the first start; and `relay-jobs doctor` then reports no `fail` (sql_console_role
// included). Replicas are started with `node`, never `npx … &`. Names are made unique for the
// machine's shared server (roles are server-wide) and dropped after.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { DoctorReport } from '../src/areas/doctor/index.js';
import { runCli, ServiceProcess } from './helpers/cli.js';
import { dropRedisPrefix, freePort, PG_ADMIN_URL, REDIS_URL, TEST_MASTER_KEY } from './helpers/services.js';

const README = readFileSync(fileURLToPath(new URL('../README.md', import.meta.url)), 'utf8');
const section = README.slice(README.indexOf('## Cluster mode'));
const block = /```sh\n([\s\S]*?)```/.exec(section)![1]!;
const heredoc = /<<'SQL'\n([\s\S]*?)\nSQL\n/.exec(block)![1]!;

const tag = randomBytes(4).toString('hex');
const names = { relay: `rj_readme_${tag}`, relay_sql: `rj_readme_sql_${tag}` };
/** The README's names made unique: `relay_sql` before `relay`, word by word (a role and the database share `relay`). */
const rename = (sql: string) => sql.replace(/\brelay_sql\b/g, names.relay_sql).replace(/\brelay\b/g, names.relay);

async function admin<T>(database: string | undefined, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const url = new URL(PG_ADMIN_URL);
  if (database) url.pathname = `/${database}`;
  const c = new pg.Client({ connectionString: url.toString() });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

describe("the README's cluster example", () => {
  const prefix = `rj-readme-${tag}`;
  let replica: ServiceProcess | undefined;
  afterAll(async () => {
    if (replica && replica.proc.exitCode === null) {
      replica.proc.kill('SIGKILL');
      await replica.exited;
    }
    await admin(undefined, async (c) => {
      await c.query(`DROP DATABASE IF EXISTS ${names.relay} WITH (FORCE)`);
      await c.query(`DROP ROLE IF EXISTS ${names.relay_sql}`);
      await c.query(`DROP ROLE IF EXISTS ${names.relay}`);
    });
    await dropRedisPrefix(prefix);
  });

  it('starts replicas with node as an application role, and the console role passes the doctor', async () => {
    expect(block).not.toMatch(/npx relay-jobs start/);
    expect(block).toMatch(/^RELAY_JOBS_INSTANCE_ID=r1 .*node \S*dist\/cli\/main\.js start &$/m);
    expect(block).toMatch(/^export DATABASE_URL=postgres:\/\/relay:\$RELAY_DB_PASSWORD@/m);
    expect(block).toMatch(/^export RELAY_JOBS__SQL__DATABASE_URL=postgres:\/\/relay_sql:\$RELAY_SQL_PASSWORD@/m);
    expect(block).not.toMatch(/postgres:\/\/postgres@/);

    // The README's SQL, as the superuser, with its psql variables given (trust: passwords unused here).
    const sql = rename(heredoc)
      .replace(/:'app_pw'/g, "'readme-app'")
      .replace(/:'sql_pw'/g, "'readme-sql'");
    await admin(undefined, async (c) => {
      for (const stmt of sql
        .split(';\n')
        .map((s) => s.trim())
        .filter(Boolean))
        await c.query(stmt);
    });

    const url = (role: string) => {
      const u = new URL(PG_ADMIN_URL);
      u.username = role;
      u.password = 'unused';
      u.pathname = `/${names.relay}`;
      return u.toString();
    };
    const env = {
      DATABASE_URL: url(names.relay),
      REDIS_URL,
      RELAY_JOBS_ENV: `readme-${tag}`,
      RELAY_JOBS__SQL__DATABASE_URL: url(names.relay_sql),
      RELAY_JOBS_ADMIN_TOKEN: `readme-${tag}-admin-token-0123456789abcdef`,
      RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
      RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
    };
    const port = await freePort();
    replica = ServiceProcess.start('r1', { ...env, RELAY_JOBS_INSTANCE_ID: 'r1', RELAY_JOBS_HTTP_PORT: String(port) });
    await replica.waitForLine(/relay-jobs started: ready/);

    // After the first start: the recipe, without its CREATE ROLE line, as the superuser in the database.
    // The file the README's recipe runs (deploy/postgres/console-grants.sql, kept equal to consoleRoleSql() by deploy-files.test).
    expect(README).toContain('-f deploy/postgres/console-grants.sql');
    const grants = rename(readFileSync(new URL('../deploy/postgres/console-grants.sql', import.meta.url), 'utf8'));
    await admin(names.relay, (c) => c.query(grants));

    const doctor = await runCli(['doctor', '--json'], env);
    const report = JSON.parse(doctor.stdout) as DoctorReport;
    // autovacuum_server judges the machine's shared server, which the suite runs with autovacuum off.
    const failed = report.checks.filter((c) => c.status === 'fail' && c.name !== 'autovacuum_server').map((c) => `${c.name}: ${c.measured}`);
    expect(failed).toEqual([]);
    expect(report.checks.find((c) => c.name === 'sql_console_role')?.status).toBe('ok');

    // The console answers as its own role.
    const who = await runCli(['sql', 'select current_user', '--json'], env);
    expect(who.code, who.stderr).toBe(0);
    expect(who.stdout).toContain(names.relay_sql);

    replica.proc.kill('SIGTERM');
    expect(await replica.exitedWithin(60_000)).toBe(0);
  });
});

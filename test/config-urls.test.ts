import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../src/app/config-schema.js';
import { httpUrlProblem, serverUrlProblem } from '../src/config/server-url.js';
import { parseRedisUrl } from '../src/config/redis-url.js';
import { openSqlConsole } from '../src/areas/admin/store/sql-console.js';
import { sqlConsoleRole } from '../src/areas/doctor/checks/security.js';
import type { DoctorContext } from '../src/areas/doctor/index.js';
import { PgDb } from '../src/store/pg-db.js';
import { runCli } from './helpers/cli.js';
import { REDIS_URL, TEST_MASTER_KEY, freePort, freshDatabase } from './helpers/services.js';

const SECRET = 'hunter2-url-secret';
const cluster = { RELAY_JOBS_INSTANCE_ID: 'u1', RELAY_JOBS_ENV: 'test', RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY };

function problems(env: Record<string, string>): string {
  try {
    loadConfig({ env });
  } catch (err) {
    return (err as Error).message;
  }
  return '';
}

/** Issue 51, point 5: every server URL is checked when the config loads, naming the variable; connection errors name the variable the URL came from. */
describe('server URLs are checked up front', () => {
  it('a bad port, bad percent-encoding or no host is a config error naming the variable, never the password', () => {
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ DATABASE_URL: 'postgres://u@127.0.0.1/db', REDIS_URL: 'redis://127.0.0.1:99999' }, /redis\.url \(REDIS_URL\): not a valid URL \(check the port, which must be 1-65535/],
      [{ DATABASE_URL: `postgres://u:${SECRET}%ZZ@127.0.0.1/db`, REDIS_URL }, /database\.url \(DATABASE_URL\): the password has a bad percent-encoding/],
      [{ DATABASE_URL: 'postgres:///relay', REDIS_URL }, /database\.url \(DATABASE_URL\): no host/],
      [{ DATABASE_URL: 'postgres://u@127.0.0.1:0/db', REDIS_URL }, /database\.url \(DATABASE_URL\): port 0/],
      [{ DATABASE_URL: 'postgres://u@127.0.0.1/db', DATABASE_DIRECT_URL: 'postgres://u@127.0.0.1:70000/db', REDIS_URL }, /database\.direct_url \(DATABASE_DIRECT_URL\): not a valid URL/],
      [{ DATABASE_URL: 'postgres://u@127.0.0.1/db', REDIS_URL: `redis://:${SECRET}%G1@127.0.0.1:6379` }, /redis\.url \(REDIS_URL\): the password has a bad percent-encoding/],
      [{ DATABASE_URL: 'postgres://u@127.0.0.1/db', REDIS_URL: 'redis+sentinel://s1:26379,s2:99999/mymaster' }, /redis\.url \(REDIS_URL\): host 2 of the list has port 99999, outside 1-65535/],
      [{ DATABASE_URL: 'postgres://u@127.0.0.1/db', REDIS_URL, RELAY_JOBS__SQL__DATABASE_URL: 'postgres://ro@/x' }, /sql\.database_url \(RELAY_JOBS__SQL__DATABASE_URL\): not a valid URL/],
      // A raw # in the password: the parser ends the host part there and reads host "ss" (it was "host not found", with the rest of the password printed).
      [{ DATABASE_URL: `postgres://u:p@ss#${SECRET}@127.0.0.1:5432/db`, REDIS_URL }, /database\.url \(DATABASE_URL\): an @ after the host: a # or \/ written raw in the user name or password/],
      [
        { DATABASE_URL: 'postgres://u@127.0.0.1/db', REDIS_URL: `redis://:p@ss#${SECRET}@127.0.0.1:6379` },
        /redis\.url \(REDIS_URL\): a # written raw \(in the password\?\) ends the URL there: percent-encode it as %23/,
      ],
    ];
    for (const [env, pattern] of cases) {
      const text = problems({ ...cluster, ...env });
      expect(text, JSON.stringify(env)).toMatch(pattern);
      expect(text).not.toContain(SECRET);
    }
    // What the drivers accept stays accepted: a socket directory, an encoded %, IPv6, a database number.
    for (const url of ['postgres:///relay?host=/var/run/postgresql', `postgres://u:p%25q@[::1]:5432/relay`, 'postgresql://u@db.example:6432/relay?sslmode=verify-full'])
      expect(serverUrlProblem(url, 'postgres'), url).toBeNull();
    expect(serverUrlProblem('redis://:p%40ss@127.0.0.1:6379/3', 'redis')).toBeNull();
    expect(serverUrlProblem('redis://127.0.0.1:6379/x', 'redis')).toMatch(/database number/);
  });

  it('config check exits 2 with the line; an unreachable DATABASE_DIRECT_URL is named as itself', async () => {
    const check = await runCli(['config', 'check'], { ...cluster, DATABASE_URL: 'postgres://u@127.0.0.1/db', REDIS_URL: 'redis://127.0.0.1:99999' });
    expect(check.code).toBe(2);
    expect(check.stderr).toMatch(/redis\.url \(REDIS_URL\): not a valid URL/);
    expect(check.stderr).not.toMatch(/\n\s+at /);

    const dead = await freePort();
    const db = await freshDatabase();
    try {
      const r = await runCli(['start'], {
        ...cluster,
        RELAY_JOBS_HTTP_PORT: '0',
        RELAY_JOBS__DATABASE__CONNECT_TIMEOUT: '2s',
        RELAY_JOBS__DATABASE__STARTUP_WAIT: '0s', // one attempt: waiting for a database not up yet is test/startup-wait.e2e's
        DATABASE_URL: db.url,
        DATABASE_DIRECT_URL: `postgres://postgres:${SECRET}@127.0.0.1:${dead}/x`,
        REDIS_URL,
      });
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/^relay-jobs: cannot connect to PostgreSQL at postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:\d+\/x \(DATABASE_DIRECT_URL\): connection refused/);
      expect(r.stderr).not.toContain(SECRET);
    } finally {
      await db.drop();
    }
  });
});

/** Issue 51, point 5 (the audit's second pass): every outgoing http(s) URL key is checked the same way, and the Sentinel form names the badly encoded part. */
describe('http(s) URL keys are checked up front', () => {
  const s3 = (area: 'BACKUP' | 'IMAGE') => ({ [`RELAY_JOBS__${area}__STORAGE`]: 's3', [`RELAY_JOBS__${area}__S3__BUCKET`]: 'relay-bucket' });
  it('a bad port, no host, a bad percent-encoding or another scheme is a config error naming the key and variable, never the password', () => {
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ RELAY_JOBS__NOTIFY__WEBHOOK__URL: 'http://hooks.example:99999/x' }, /notify\.webhook\.url \(RELAY_JOBS__NOTIFY__WEBHOOK__URL\): port 99999 is outside 1-65535/],
      [{ RELAY_JOBS__NOTIFY__WEBHOOK__URL: 'http://:80/x' }, /notify\.webhook\.url \(RELAY_JOBS__NOTIFY__WEBHOOK__URL\): no host/],
      [{ RELAY_JOBS__NOTIFY__WEBHOOK__URL: `http://u:${SECRET}%ZZ@hooks.example/x` }, /notify\.webhook\.url \(RELAY_JOBS__NOTIFY__WEBHOOK__URL\): the password has a bad percent-encoding/],
      [{ RELAY_JOBS__NOTIFY__WEBHOOK__URL: 'https://hooks.example/a%G1' }, /notify\.webhook\.url \(RELAY_JOBS__NOTIFY__WEBHOOK__URL\): the path has a bad percent-encoding/],
      [{ ...s3('BACKUP'), RELAY_JOBS__BACKUP__S3__ENDPOINT: 'http://minio:99999' }, /backup\.s3\.endpoint \(RELAY_JOBS__BACKUP__S3__ENDPOINT\): port 99999 is outside 1-65535/],
      [{ ...s3('IMAGE'), RELAY_JOBS__IMAGE__S3__ENDPOINT: 'http://minio:0' }, /image\.s3\.endpoint \(RELAY_JOBS__IMAGE__S3__ENDPOINT\): port 0/],
      [{ RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: 'http://img.example:99999/v1' }, /image\.provider\.base_url \(RELAY_JOBS__IMAGE__PROVIDER__BASE_URL\): port 99999 is outside 1-65535/],
      [
        { RELAY_JOBS__PAYMENTS__PROVIDERS__EPAY__BASE_URL: 'https://:443/pay', RELAY_JOBS__PAYMENTS__PROVIDERS__EPAY__WEBHOOK_SECRET: 'whsec-0123456789abcdef' },
        /payments\.providers\.epay\.base_url \(RELAY_JOBS__PAYMENTS__PROVIDERS__EPAY__BASE_URL\): no host/,
      ],
      [{ RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__API_URL: 'https://api.example:70000' }, /oauth\.providers\.openai\.api_url \(RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__API_URL\): port 70000 is outside/],
      [{ REDIS_URL: `redis+sentinel://:${SECRET}%ZZ@s1:26379/mymaster`, DATABASE_URL: 'postgres://u@127.0.0.1/db' }, /redis\.url \(REDIS_URL\): the password has a bad percent-encoding/],
    ];
    for (const [env, pattern] of cases) {
      const text = problems({ ...cluster, ...env });
      expect(text, JSON.stringify(env)).toMatch(pattern);
      expect(text).not.toContain(SECRET);
    }
    expect(httpUrlProblem('ftp://files.example/x')).toMatch(/expected an http:\/\/ or https:\/\/ URL/);
    for (const url of ['https://hooks.example/x?a=%25', 'http://127.0.0.1:9000', 'https://[::1]:8443/v1', 'http://minio.local:65535/']) expect(httpUrlProblem(url), url).toBeNull();
    // Each part of a Sentinel URL that is decoded says which one is badly encoded.
    expect(() => parseRedisUrl('redis+sentinel://us%ZZer:p@s1/mymaster')).toThrow(/^the user name has a bad percent-encoding/);
    expect(() => parseRedisUrl('redis+sentinel://s1/my%ZZ')).toThrow(/^the primary group name has a bad percent-encoding/);
    expect(() => parseRedisUrl(`redis+sentinel://s1/mymaster?sentinel_password=${SECRET}%G1`)).toThrow(/^the sentinel_password has a bad percent-encoding/);
    // A raw / or ? in the password cuts the host part short: said without quoting what it cut (part of the password).
    for (const url of [`redis+sentinel://:Qx7/${SECRET}@s1:26379,s2:26379/m`, `redis+sentinel://:Qx7?${SECRET}@s1:26379/m`, `redis+sentinel://:${SECRET}/x@s1/m`]) {
      const err = (() => {
        try {
          parseRedisUrl(url);
        } catch (e) {
          return (e as Error).message;
        }
        return 'parsed';
      })();
      expect(err, url).toMatch(/^(an @ after the host: a # or \/ written raw|host 1 of the list is not host or host:port)/);
      expect(err).not.toContain(SECRET);
      expect(err).not.toContain('Qx7');
    }
    expect(parseRedisUrl('redis+sentinel://:p%40ss@s1/mymaster?sentinel_password=a%2Bb')).toMatchObject({ password: 'p@ss', sentinelPassword: 'a+b' });
  });

  it('config check exits 2 on a webhook URL with port 99999', async () => {
    const check = await runCli(['config', 'check'], { RELAY_JOBS__NOTIFY__WEBHOOK__URL: 'http://hooks.example:99999/x' });
    expect(check.code).toBe(2);
    expect(check.stderr).toMatch(/notify\.webhook\.url \(RELAY_JOBS__NOTIFY__WEBHOOK__URL\): port 99999 is outside 1-65535/);
  });
});

/** The example Secret's placeholders (deploy/kubernetes/secret.example.yaml) are refused as secrets. */
describe('placeholder secrets', () => {
  it('an admin token or master key containing CHANGE-ME (any case) is a config error naming the key', () => {
    expect(problems({ RELAY_JOBS_ADMIN_TOKEN: 'CHANGE-ME-at-least-32-random-characters' })).toMatch(
      /http\.admin_token \(RELAY_JOBS_ADMIN_TOKEN\): is still the example placeholder \(it contains CHANGE-ME\)/,
    );
    expect(problems({ RELAY_JOBS_MASTER_KEY: 'CHANGE-ME-32-random-bytes-base64' })).toMatch(/security\.master_key \(RELAY_JOBS_MASTER_KEY\): is still the example placeholder/);
    expect(problems({ RELAY_JOBS_ADMIN_TOKEN: 'please-change-me-0123456789abcdef' })).toMatch(/http\.admin_token .*example placeholder/);
    expect(problems({ RELAY_JOBS_ADMIN_TOKEN: 'a-real-random-token-0123456789abcdef', RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY })).toBe('');
    // The example Secret applied as shipped does not start.
    const example = parse(readFileSync(new URL('../deploy/kubernetes/secret.example.yaml', import.meta.url), 'utf8')) as { stringData: Record<string, string> };
    expect(problems({ RELAY_JOBS_ADMIN_TOKEN: example.stringData['admin-token']! })).toMatch(/http\.admin_token .*example placeholder/);
    expect(problems({ RELAY_JOBS_MASTER_KEY: example.stringData['master-key']! })).toMatch(/security\.master_key .*example placeholder/);
  });
});

/** A connection error of the console's own pool names sql.database_url and the variable it came from. */
describe('sql.database_url connection errors name their source', () => {
  it('the console and the doctor say sql.database_url (RELAY_JOBS__SQL__DATABASE_URL), never the password', async () => {
    const dead = await freePort();
    const config = loadConfig({
      env: {
        ...cluster,
        DATABASE_URL: 'postgres://u@127.0.0.1:5432/db',
        REDIS_URL,
        RELAY_JOBS__SQL__DATABASE_URL: `postgres://ro:${SECRET}@127.0.0.1:${dead}/x`,
        RELAY_JOBS__DATABASE__CONNECT_TIMEOUT: '2s',
      },
    });
    const service = new PgDb({ url: config.database.url!, poolSize: 1, connectTimeoutMs: 2000 });
    const sql = openSqlConsole(config, service);
    const named = new RegExp(`^cannot connect to PostgreSQL at postgres://ro:\\*\\*\\*@127\\.0\\.0\\.1:${dead}/x \\(sql\\.database_url from RELAY_JOBS__SQL__DATABASE_URL\\): connection refused`);
    try {
      const err = (await sql.console.run('SELECT 1').catch((e: unknown) => e)) as Error & { code?: string };
      expect(err.message).toMatch(named);
      expect(err.message).not.toContain(SECRET);
      expect(err.code).toBe('sql_unavailable');
      const doctor = (await sqlConsoleRole.run({ config } as DoctorContext).catch((e: unknown) => e)) as Error;
      expect(doctor.message).toMatch(named);
      expect(doctor.message).not.toContain(SECRET);
    } finally {
      await sql.close();
      await service.close();
    }
  });
});

describe('a removed key', () => {
  it('channel_monitor.account_base_url still loads, ignored with a warning naming the key that replaced it', () => {
    const c = loadConfig({ env: { RELAY_JOBS__CHANNEL_MONITOR__ACCOUNT_BASE_URL: 'https://relay.example' } });
    expect(c.warnings.join('\n')).toMatch(/channel_monitor\.account_base_url \(RELAY_JOBS__CHANNEL_MONITOR__ACCOUNT_BASE_URL\) is no longer used.*oauth\.providers\.<platform>\.api_url/);
    expect(JSON.stringify(c.channel_monitor)).not.toContain('relay.example');
  });
});

import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/app/config-schema.js';
import { serverUrlProblem } from '../src/config/server-url.js';
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

describe('a removed key', () => {
  it('channel_monitor.account_base_url still loads, ignored with a warning naming the key that replaced it', () => {
    const c = loadConfig({ env: { RELAY_JOBS__CHANNEL_MONITOR__ACCOUNT_BASE_URL: 'https://relay.example' } });
    expect(c.warnings.join('\n')).toMatch(/channel_monitor\.account_base_url \(RELAY_JOBS__CHANNEL_MONITOR__ACCOUNT_BASE_URL\) is no longer used.*oauth\.providers\.<platform>\.api_url/);
    expect(JSON.stringify(c.channel_monitor)).not.toContain('relay.example');
  });
});

import { describe, expect, it } from 'vitest';
import { redactUrl, scrubUrlSecrets } from '../src/config/redact-url.js';
import { loadConfig } from '../src/app/config-schema.js';
import { redactConfig } from '../src/config/load.js';
import { PgDb } from '../src/store/pg-db.js';
import { connectRedis } from '../src/coordination/redis-client.js';
import { freePort } from './helpers/services.js';

/** One WHATWG-based redaction for every URL that can reach a log, an error, an API view or `config check --print` (issue 10). */
describe('URL redaction', () => {
  it.each([
    ['postgres://user:pa@ss@db.example:5432/app', 'postgres://user:***@db.example:5432/app', ['pa@ss', 'ss@db']],
    ['http://TOKEN123secret@proxy.example:3128', 'http://***@proxy.example:3128/', ['TOKEN123secret']],
    ['redis://:hunter2@cache:6379/0', 'redis://:***@cache:6379/0', ['hunter2']],
    ['postgres://u@h/db?password=s3cr3t&sslmode=require', 'postgres://***@h/db?password=***&sslmode=require', ['s3cr3t']],
    ['https://hooks.example/x?token=abcdef&Api-Key=zzz999', 'https://hooks.example/x?token=***&Api-Key=***', ['abcdef', 'zzz999']],
    ['http://plain.example:8080/path', 'http://plain.example:8080/path', []],
    // Parameter names that end in a secret word: Sentinel's own password, a proxy's.
    ['redis+sentinel://:s3cr3t@s1:26379/mymaster?sentinel_password=snt1nel', 'redis+sentinel://:***@s1:26379/mymaster?sentinel_password=***', ['s3cr3t', 'snt1nel']],
    ['http://proxy.example:3128/?proxy_password=pr0xy&X-Api-Key=k3y', 'http://proxy.example:3128/?proxy_password=***&X-Api-Key=***', ['pr0xy', 'k3y']],
    // A raw # in the password ends the host part early (the parser reads host "ss"): masked up to the last @.
    ['postgres://u:p@ss#wordSEKRIT@127.0.0.1:5432/db', 'postgres://***@127.0.0.1:5432/db', ['wordSEKRIT', 'p@ss']],
    ['https://tok#en99@hooks.example/x', 'https://***@hooks.example/x', ['tok', 'en99']],
    // An @ of an http path's own stays.
    ['https://chat.example/api/@me?token=abc', 'https://chat.example/api/@me?token=***', ['abc']],
  ])('%s', (url, want, secrets) => {
    expect(redactUrl(url)).toBe(want);
    for (const s of secrets) expect(redactUrl(url)).not.toContain(s);
  });

  it('masks what the parser refuses too', () => {
    const r = redactUrl('http://us:er:pw@[::1:bad/x?token=t0k3n');
    expect(r).not.toMatch(/pw|t0k3n/);
  });

  it('a multi-host Sentinel URL (which the WHATWG parser refuses): masked, and its secrets scrubbed from a client error', () => {
    const url = 'redis+sentinel://:s3cr3t@s1:26379,s2:26379/mymaster?sentinel_password=snt1nel';
    expect(redactUrl(url)).toBe('redis+sentinel://***@s1:26379,s2:26379/mymaster?***');
    expect(scrubUrlSecrets(`auth failed with snt1nel at ${url} (s3cr3t)`, url)).toBe('auth failed with *** at redis+sentinel://***@s1:26379,s2:26379/mymaster?*** (***)');
  });

  it('scrubs a client error text that quotes the URL or its secrets', () => {
    const url = 'postgres://app:pa@ss@10.0.0.1/db';
    expect(scrubUrlSecrets(`could not reach ${url} with pa@ss`, url)).toBe('could not reach postgres://app:***@10.0.0.1/db with ***');
  });

  it('config check --print shows no credential of any URL', () => {
    const cfg = loadConfig({
      env: {
        DATABASE_URL: 'postgres://user:pa@ss@db.example:5432/app?sslpassword=kp55',
        REDIS_URL: 'redis://REDISTOKEN77@cache:6379',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS_INSTANCE_ID: 'redact-1',
        RELAY_JOBS_MASTER_KEY: Buffer.alloc(32, 1).toString('base64'),
        RELAY_JOBS__NOTIFY__WEBHOOK__URL: 'https://hooks.example/in?token=hooktok42',
      },
    });
    const printed = JSON.stringify(redactConfig(cfg));
    for (const s of ['pa@ss', 'ss@db', 'kp55', 'REDISTOKEN77', 'hooktok42']) expect(printed).not.toContain(s);
    expect(printed).toContain('db.example');
  });

  it('connection errors for DATABASE_URL and REDIS_URL name the host, never the credentials', async () => {
    const port = await freePort(); // nothing listens there
    const pgErr = await PgDb.connect({ url: `postgres://user:pa@ss@127.0.0.1:${port}/db?password=qq77`, poolSize: 1, connectTimeoutMs: 2000 }).catch((e: Error) => e);
    expect(String((pgErr as Error).message)).toMatch(/127\.0\.0\.1/);
    for (const s of ['pa@ss', 'ss@127', 'qq77']) expect((pgErr as Error).message).not.toContain(s);
    const redisErr = await connectRedis(`redis://REDISTOKEN77@127.0.0.1:${port}`, 500, 1000).catch((e: Error) => e);
    expect((redisErr as Error).message).toMatch(/127\.0\.0\.1/);
    expect((redisErr as Error).message).not.toContain('REDISTOKEN77');
  });
});

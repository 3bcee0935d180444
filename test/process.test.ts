import { describe, it } from 'vitest';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { CLI, cleanEnv, runCli, ServiceProcess, NODE_FLAGS } from './helpers/cli.js';
import { freePort } from './helpers/services.js';
import { connectRedis } from '../src/coordination/redis-client.js';
import { PgDb } from '../src/store/pg-db.js';
import { PG_ADMIN_URL } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { embeddedDataDir } from './helpers/pglite-template.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const tmp = () => mkdtempSync(join(tmpdir(), 'rj-proc-'));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
// Every test here has its own data directory, port, child or server, and nothing else in common:
// they run concurrently (each with its test context's `expect`), so the cold PGlite open of
// `npm start`, the library child and the one-shot run overlap instead of adding up. Only one of
// them is a cold open; the others open a copy of the migrated template.
describe.concurrent('process lifecycle', () => {
  it('`npm start` whose npm dies (SIGKILL, nothing forwarded) shuts the service down cleanly', async ({ expect }) => {
    // The real start script, pointed at the test build instead of the dist/ a running service may use.
    const script = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
    expect(script).toMatch(/^exec node /); // npm's shell must not stay between npm and node
    const pkg = tmp();
    writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: 'rj-start-probe', private: true, scripts: { start: script.replace('dist/', `${join(ROOT, '.test-dist')}/`) } }));
    const port = String(await freePort());
    const npm = spawn('npm', ['start', '--silent'], { cwd: pkg, env: cleanEnv({ RELAY_JOBS_DATA_DIR: join(pkg, 'data'), RELAY_JOBS_HTTP_PORT: port }), stdio: ['ignore', 'pipe', 'pipe'] });
    const svc = new ServiceProcess('npm start', npm);
    try {
      // A first start says what it is doing while the database opens and migrates, then that it is ready.
      // A cold PGlite open (a new data directory, on purpose): over 90 s at load average 20.
      const started = await svc.waitForLine(/relay-jobs started: ready/, 180_000);
      expect(svc.lines.some((l) => l.includes('creating the embedded database (PGlite) in a new data directory'))).toBe(true);
      expect(svc.lines.some((l) => l.includes('applying migration') && l.includes('1_core'))).toBe(true);
      const pid = (JSON.parse(started) as { pid: number }).pid;
      expect(pid).not.toBe(npm.pid);
      npm.kill('SIGKILL'); // the worst case: npm dies without forwarding anything
      await waitFor(() => !alive(pid), { what: 'the service to exit after npm died', timeoutMs: 60_000 });
      expect(svc.lines.some((l) => /parent process \d+ exited/.test(l))).toBe(true);
      expect(svc.lines.some((l) => l.includes('shutdown complete'))).toBe(true);
    } finally {
      npm.kill('SIGKILL');
    }
  }, 300_000);

  it('a one-shot `relay-jobs run` exits once its round is done, not after the shutdown grace', async ({ expect }) => {
    // With a 10-minute grace, a grace timer left running would keep the process alive far beyond this test's limit.
    const r = await runCli(['run', 'session_cleanup'], { RELAY_JOBS_DATA_DIR: embeddedDataDir(), RELAY_JOBS__SHUTDOWN__GRACE: '10m' }, 120_000);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout.trim())).toMatchObject({ job: 'session_cleanup' });
  }, 150_000);

  it('a library `runtime.shutdown()` leaves no timer, socket or handle behind', async ({ expect }) => {
    const child = spawn(process.execPath, [...NODE_FLAGS, '--import', 'tsx', join(ROOT, 'test/fixtures/library-shutdown.ts')], {
      cwd: ROOT,
      env: cleanEnv({ RELAY_JOBS_DATA_DIR: embeddedDataDir() }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((resolve, reject) => {
      const t = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`the library process did not exit after shutdown:\n${out}\n${err}`));
      }, 120_000);
      child.on('close', (c) => {
        clearTimeout(t);
        resolve(c);
      });
    });
    expect(err).toBe('');
    expect(code).toBe(0);
    expect(JSON.parse(out.trim())).toEqual({ left: [], restart: 'Runtime.start() after shutdown(): its connections are closed, a runtime runs once; create a new one with Runtime.create()' });
  }, 150_000);

  it('start checks the port before it creates the data directory or the admin token', async ({ expect }) => {
    const blocker: Server = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    const port = (blocker.address() as { port: number }).port;
    const dir = join(tmp(), 'data');
    try {
      const r = await runCli(['start'], { RELAY_JOBS_DATA_DIR: dir, RELAY_JOBS_HTTP_PORT: String(port) }, 60_000);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(new RegExp(`cannot listen on 0\\.0\\.0\\.0:${port} \\(RELAY_JOBS_HTTP_PORT\\): the port is in use`));
      expect(existsSync(dir)).toBe(false);
    } finally {
      blocker.close();
    }
  }, 90_000);

  it('the build keeps the CLI executable', ({ expect }) => {
    expect(statSync(CLI).mode & 0o111).toBe(0o111);
  });
});

describe.concurrent('connection errors name the cause', () => {
  it('Redis refused: ECONNREFUSED and the address, not "Connection is closed."', async ({ expect }) => {
    const port = await freePort();
    const err = await connectRedis(`redis://127.0.0.1:${port}`, 500, 2000).then(
      () => null,
      (e: Error) => e,
    );
    expect(err?.message).toMatch(new RegExp(`cannot connect to Redis at redis://127\\.0\\.0\\.1:${port} \\(REDIS_URL\\): connection refused at 127\\.0\\.0\\.1:${port} \\(ECONNREFUSED`));
    expect(err?.message).not.toMatch(/Connection is closed/);
  });

  it('a missing PostgreSQL database: the createdb hint', async ({ expect }) => {
    const url = new URL(PG_ADMIN_URL);
    url.pathname = '/relay_jobs_no_such_db';
    const err = await PgDb.connect({ url: url.toString(), poolSize: 1, connectTimeoutMs: 5000 }).then(
      () => null,
      (e: Error) => e,
    );
    expect(err?.message).toMatch(/database "relay_jobs_no_such_db" does not exist; create it first, e\.g\. `createdb relay_jobs_no_such_db`/);
  });
});

describe.concurrent('refresh network failures name the host', () => {
  it('a refused token endpoint: the code and the address, never the refresh token', async ({ expect }) => {
    const { OAuthClient } = await import('../src/areas/accounts/oauth-client.js');
    const port = await freePort();
    const client = new OAuthClient();
    const { openaiProvider } = await import('./helpers/providers.js');
    const r = await client.refresh(openaiProvider({ tokenUrl: `http://127.0.0.1:${port}/oauth/token`, clientId: 'c' }), 'rt-secret-value', {
      proxyUrl: null,
      timeoutMs: 10_000,
      replyTimeoutMs: 120_000,
      nowMs: () => Date.now(),
    });
    await client.close();
    expect(r).toMatchObject({ kind: 'transient', reason: 'network' });
    expect((r as { detail: string }).detail).toBe(`ECONNREFUSED 127.0.0.1:${port}`);
    expect(JSON.stringify(r)).not.toContain('rt-secret-value');
  });
});

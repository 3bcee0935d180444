import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { OpenAPI3 } from 'openapi-typescript';
import { API_TYPES_FILE, buildDocument, renderApiTypes } from '../scripts/api-types.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { cleanEnv, NODE_FLAGS } from './helpers/cli.js';
import { createClient } from '../src/client/index.js';

/**
 * Issue 52, point 4: the typed client (`relay-jobs/client`, src/client/) is generated from the
 * document, never written by hand. The committed types must be what `npm run api:types` writes now;
 * the document that script builds in memory must be the one a running replica serves; and
 * examples/gateway-client.ts, a gateway's round through the client, runs against that replica.
 */
const ROOT = fileURLToPath(new URL('..', import.meta.url));

describe('the generated TypeScript client', () => {
  let offline: OpenAPI3;
  let cluster: Cluster;

  beforeAll(async () => {
    const [doc, started] = await Promise.allSettled([buildDocument(), startCluster({ replicas: 1, idPrefix: 'tc', env: { RELAY_JOBS__QUOTA__FLUSH_DELAY: '200ms' } })]);
    if (started.status === 'fulfilled') cluster = started.value;
    if (doc.status === 'rejected') throw doc.reason;
    if (started.status === 'rejected') throw started.reason;
    offline = doc.value;
  });
  afterAll(() => cluster?.stop());

  it('src/client/api-types.ts is what npm run api:types writes from the current routes', async () => {
    const committed = readFileSync(API_TYPES_FILE, 'utf8');
    // Not toBe on the whole text: a stale file fails with the first lines that differ, not 5,000 lines of diff.
    const want = (await renderApiTypes(offline)).split('\n');
    const have = committed.split('\n');
    const first = want.findIndex((line, i) => line !== have[i]);
    const stale =
      first === -1
        ? want.length === have.length
          ? ''
          : `it has ${have.length} lines, ${want.length} expected`
        : `line ${first + 1} is ${JSON.stringify(have[first])}, expected ${JSON.stringify(want[first])}`;
    expect(stale, 'src/client/api-types.ts is stale: run npm run api:types').toBe('');
  });

  it('the document built without a service is the one a replica serves', async () => {
    const res = await fetch(cluster.replica(0).url('/api/v1/openapi.json'));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual(offline);
  });

  it('examples/gateway-client.ts runs against the replica: account, token, usage (retried), snapshot, quota', async () => {
    const child = spawn(process.execPath, [...NODE_FLAGS, '--import', 'tsx', 'examples/gateway-client.ts'], {
      cwd: ROOT,
      env: cleanEnv({ RELAY_JOBS_URL: cluster.replica(0).url(), RELAY_JOBS_ADMIN_TOKEN: cluster.adminToken, TSX_TSCONFIG_PATH: 'examples/tsconfig.json' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code, `${out}\n${err}`).toBe(0);
    const result = JSON.parse(out.trim().split('\n').pop()!);
    expect(result).toMatchObject({
      token_matches: true,
      usage: [
        { stored: 2, duplicates: 0 },
        { stored: 0, duplicates: 2 },
      ],
      in_snapshot: true,
      quota_used: 150,
      bad_batch: { status: 400, code: 'invalid' },
    });
    // The token is a secret: the example prints whether it matched, never the token.
    expect(out).not.toContain('example-access-');
  });

  it("a call gives up after the client's timeoutMs when the service never answers", async () => {
    const silent = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const api = createClient({ baseUrl: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, token: 't', timeoutMs: 300 });
      await expect(api.GET('/readyz')).rejects.toMatchObject({ name: 'TimeoutError' });
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
  });

  it('the deadline fires while garbage collections run during the wait, and the process then exits on its own', async () => {
    // A child of its own: --expose-gc. On Node 20 a Request's composite timeout signal was collected, and the call hung.
    const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', fileURLToPath(new URL('./fixtures/client-timeout-gc.ts', import.meta.url))], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (err += d));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code, err).toBe(0);
    const r = JSON.parse(out) as Record<'timedOut' | 'aborted', { outcome: string; ms: number }>;
    expect(r.timedOut.outcome).toBe('TimeoutError');
    expect(r.timedOut.ms).toBeGreaterThanOrEqual(450);
    expect(r.aborted.outcome).toBe('AbortError');
  }, 60_000);
});

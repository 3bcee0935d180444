import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startCluster, type Cluster } from './helpers/cluster.js';

/**
 * Issue 52, point 3: the OpenAPI document checked by an independent implementation. The Go program
 * in test/contract-go/ (kin-openapi, Debian's packages, built offline in GOPATH mode) plays a
 * gateway against a real replica on PostgreSQL + Redis, validating every request and answer against
 * the document the replica serves. Then it is fed drifted copies of that document, a response field
 * and a request field changed, and must name the operation and the field: a checker that cannot
 * fail proves nothing.
 */
const SRC = fileURLToPath(new URL('./contract-go/', import.meta.url));
// The binary and Go's build cache live beside npm's caches: rebuilt incrementally (a second build is
// a fraction of a second), never in the source tree.
const CACHE = fileURLToPath(new URL('../node_modules/.cache/contract-go/', import.meta.url));
const BIN = join(CACHE, 'contract-go');
const GOPATH = '/usr/share/gocode';
const KIN = join(GOPATH, 'src/github.com/getkin/kin-openapi/openapi3filter');

const goEnv = (): NodeJS.ProcessEnv => ({
  PATH: process.env.PATH,
  HOME: CACHE,
  GOCACHE: join(CACHE, 'go-build'),
  GOPATH,
  GO111MODULE: 'off',
  GOFLAGS: '',
  GOPROXY: 'off',
  GOTOOLCHAIN: 'local',
  // Pure Go: no C compiler needed (Debian's golang-go does not pull gcc in without recommends).
  CGO_ENABLED: '0',
});

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
  report: { ok: boolean; operations: string[]; violation: string } | undefined;
}

function runChecker(url: string, token: string, doc?: string): Promise<Outcome> {
  const args = ['-url', url, ...(doc ? ['-doc', doc] : [])];
  const child = spawn(BIN, args, { env: { PATH: process.env.PATH, RELAY_JOBS_ADMIN_TOKEN: token }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) =>
    child.on('close', (code) => {
      const last = stdout.trim().split('\n').pop() ?? '';
      let report: Outcome['report'];
      try {
        report = JSON.parse(last) as Outcome['report'];
      } catch {
        report = undefined;
      }
      resolve({ code, stdout, stderr, report });
    }),
  );
}

type Json = Record<string, any>;

/** The operation at `method path` of `doc`, failing the test when the document lacks it. */
function op(doc: Json, method: string, path: string): Json {
  const o = doc.paths?.[path]?.[method] as Json | undefined;
  if (!o) throw new Error(`the document has no ${method.toUpperCase()} ${path}`);
  return o;
}

/** A schema with its `$ref` followed (one level: components are not nested by reference at the top). */
function resolve(doc: Json, schema: Json): Json {
  const ref = schema.$ref as string | undefined;
  return ref ? (doc.components.schemas[ref.replace('#/components/schemas/', '')] as Json) : schema;
}

describe('the OpenAPI document, checked by a Go gateway with kin-openapi', () => {
  let cluster: Cluster;
  let url: string;
  let doc: Json;
  let tmp: string;

  beforeAll(async () => {
    // The toolchain is Debian's; .ci/run installs it. Without it this file fails saying what to install.
    if (!existsSync(KIN)) throw new Error(`kin-openapi is not installed at ${KIN}: apt-get install golang-go golang-github-getkin-kin-openapi-dev (.ci/run does)`);
    mkdirSync(CACHE, { recursive: true });
    tmp = mkdtempSync(join(tmpdir(), 'rj-contract-go-'));
    // The build and the replica's start side by side; a failed build still stops the replica.
    const [built, started] = await Promise.allSettled([
      promisify(execFile)('go', ['build', '-o', BIN, '.'], { cwd: SRC, env: goEnv() }),
      // Quota counters flushed 200 ms after an increment: the user's counters reach GET /quota soon.
      startCluster({ replicas: 1, idPrefix: 'cg', env: { RELAY_JOBS__QUOTA__FLUSH_DELAY: '200ms' } }),
    ]);
    if (started.status === 'fulfilled') cluster = started.value;
    if (built.status === 'rejected') throw new Error(`go build in test/contract-go failed: ${(built.reason as { stderr?: string }).stderr ?? String(built.reason)}`);
    if (started.status === 'rejected') throw started.reason;
    url = cluster.replica(0).url();
    const res = await fetch(`${url}/api/v1/openapi.json`);
    expect(res.status, await res.clone().text()).toBe(200);
    doc = (await res.json()) as Json;
  });
  afterAll(async () => {
    await cluster?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('plays the gateway against the live replica: every request and answer valid, every call made', async () => {
    const out = await runChecker(url, cluster.adminToken);
    expect(out.code, `${out.stderr}\n${out.stdout}`).toBe(0);
    expect(out.report?.ok).toBe(true);
    // Each call of the scenario, named as the document names it: nothing skipped silently.
    const id = (method: string, path: string) => op(doc, method, path).operationId as string;
    const calls: Array<[string, string, number]> = [
      ['get', '/api/v1/openapi.json', 200],
      ['get', '/readyz', 200],
      ['post', '/api/v1/accounts', 201],
      ['post', '/api/v1/accounts/{id}/token', 200],
      ['post', '/api/v1/usage', 200],
      ['get', '/api/v1/scheduler/accounts', 200],
      ['get', '/api/v1/changes', 200],
      ['post', '/api/v1/quota/usage', 200],
      ['get', '/api/v1/quota/{user}', 200],
      ['post', '/api/v1/idempotency/begin', 200],
      ['post', '/api/v1/idempotency/complete', 200],
      ['post', '/api/v1/jobs/{name}/run', 202],
      ['get', '/api/v1/jobs/{name}/runs/{id}', 200],
      ['get', '/api/v1/jobs', 401],
      ['get', '/api/v1/scheduler/accounts', 400],
      ['post', '/api/v1/usage', 400],
      ['post', '/api/v1/accounts/{id}/token', 404],
      ['post', '/api/v1/jobs/{name}/run', 404],
    ];
    const made = new Set(out.report!.operations);
    expect(calls.map(([m, p, s]) => `${id(m, p)} ${s}`).filter((c) => !made.has(c))).toEqual([]);
  });

  it('names the operation and the field when an answer drifts from the document', async () => {
    // The usage answer's `stored` documented as a string: the live answer (a number) must be refused.
    const drifted = structuredClone(doc);
    const usage = op(drifted, 'post', '/api/v1/usage');
    const schema = resolve(drifted, usage.responses['200'].content['application/json'].schema as Json);
    expect(schema.properties?.stored, 'the usage answer documents `stored`').toBeDefined();
    schema.properties.stored = { type: 'string' };
    const file = join(tmp, 'response-drift.json');
    writeFileSync(file, JSON.stringify(drifted));
    const out = await runChecker(url, cluster.adminToken, file);
    expect(out.code, out.stderr).toBe(1);
    expect(out.stderr).toContain(`operation ${usage.operationId as string} (POST /api/v1/usage): response:`);
    expect(out.stderr).toMatch(/"\/stored"/);
  });

  it('names the operation and the field when the document refuses a request the server takes', async () => {
    // An account's name documented as at most 3 characters: the gateway's request must be refused before it is sent.
    const drifted = structuredClone(doc);
    const create = op(drifted, 'post', '/api/v1/accounts');
    const schema = resolve(drifted, create.requestBody.content['application/json'].schema as Json);
    expect(schema.properties?.name, 'the account body documents `name`').toBeDefined();
    schema.properties.name = { ...resolve(drifted, schema.properties.name as Json), maxLength: 3 };
    const file = join(tmp, 'request-drift.json');
    writeFileSync(file, JSON.stringify(drifted));
    const out = await runChecker(url, cluster.adminToken, file);
    expect(out.code, out.stderr).toBe(1);
    expect(out.stderr).toContain(`operation ${create.operationId as string} (POST /api/v1/accounts): request:`);
    expect(out.stderr).toMatch(/"\/name"/);
  });

  it('refuses a document that is not valid OpenAPI 3.0.3', async () => {
    const broken = structuredClone(doc);
    // A path parameter the path does not have: kin-openapi's Validate must catch it.
    op(broken, 'post', '/api/v1/usage').parameters = [{ name: 'ghost', in: 'path', required: true, schema: { type: 'string' } }];
    const file = join(tmp, 'invalid.json');
    writeFileSync(file, JSON.stringify(broken));
    const out = await runChecker(url, cluster.adminToken, file);
    expect(out.code, out.stderr).toBe(1);
    expect(out.stderr).toContain('operation getOpenApiDocument (GET /api/v1/openapi.json): document: is not valid OpenAPI 3.0');
    expect(out.stderr).toContain('ghost');
  });
});

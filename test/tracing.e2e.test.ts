import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLUSTER_ADMIN_TOKEN, startCluster, type Cluster } from './helpers/cluster.js';
import { waitFor } from './helpers/wait.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { OtlpReceiver, type ReceivedSpan } from './fixtures/otlp-receiver.js';
import { embeddedDataDir } from './helpers/pglite-template.js';

/**
 * OpenTelemetry traces (issue 52 point 5) from real replicas to a local OTLP/HTTP receiver that
 * decodes what it gets (test/fixtures/otlp-receiver.ts). A gateway's `traceparent` is continued
 * by the request's span; a manual run's round links to that span; the refreshes the round armed
 * link to the round; an admin refresh is a child of its request. Configured by the standard
 * OTEL_* variables only; nothing secret is ever exported.
 */
const traceId = () => randomBytes(16).toString('hex');
const spanId = () => randomBytes(8).toString('hex');
const traceparent = (t: string, p: string, sampled = true) => `00-${t}-${p}-${sampled ? '01' : '00'}`;
const COLLECTOR_KEY = 'collector-key-5f1e2d';

function only(spans: ReceivedSpan[], what: string): ReceivedSpan {
  expect(spans, `exactly one span: ${what}`).toHaveLength(1);
  return spans[0]!;
}

describe('traces over OTLP/HTTP protobuf (the default), from a cluster replica', () => {
  let receiver: OtlpReceiver;
  let oauth: FakeOAuthServer;
  let cluster: Cluster;

  beforeAll(async () => {
    receiver = await OtlpReceiver.start();
    oauth = await FakeOAuthServer.start({ lifetimeSec: 3600, rotate: true, clientId: 'trace-client' });
    cluster = await startCluster({
      replicas: ['tr0'],
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_HEADERS: `x-collector-key=${COLLECTOR_KEY}`,
        OTEL_SERVICE_NAME: 'relay-jobs-e2e',
        // Nothing is exported before the shutdown's flush (unless 512 spans fill a batch): the flush is tested too.
        OTEL_BSP_SCHEDULE_DELAY: '600000',
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'trace-client',
        RELAY_JOBS__AUTH__REFRESH_MARGIN_SECONDS: '600',
        // Only the manual run below syncs the refresh schedule after the account exists, and only the
        // manual idempotency_cleanup round holds its lock: slots once a year (an hourly or minutely
        // slot is wall-clock aligned, so it could fall inside the test and take the round or the lock).
        RELAY_JOBS__JOBS__TOKEN_REFRESH__CRON: '0 0 1 1 *',
        RELAY_JOBS__JOBS__IDEMPOTENCY_CLEANUP__CRON: '0 0 1 1 *',
      },
    });
  });
  afterAll(async () => {
    await cluster?.stop();
    await oauth?.close();
    await receiver?.close();
  });

  it('continues traceparent, links the manual round to its request and the refresh to its round, and exports no secret', async () => {
    // The job's start-up sync (never awaited; it first waits for the first heartbeat's member list)
    // must be over before the account exists, or it arms the account itself and the manual round
    // below finds nothing to arm. Two rounds run and ended: the start-up sync read long before.
    const endedRound = async (job: string) => {
      const res = await cluster.api(0, `/jobs/${job}/run`, { method: 'POST' });
      expect(res.status, await res.clone().text()).toBe(202);
      const { run_id } = (await res.json()) as { run_id: number };
      await waitFor(async () => ((await (await cluster.api(0, `/jobs/${job}/runs/${run_id}`)).json()) as { run: { status: string } }).run.status !== 'running', {
        what: `the ${job} round ${run_id} to end`,
      });
      return run_id;
    };
    await endedRound('token_refresh');
    await endedRound('token_refresh');
    const credentials = oauth.issue('traced', 2); // due at once: inside the 600 s margin, expiring
    const T0 = traceId();
    const created = await cluster.api(0, '/accounts', { body: { platform: 'openai', name: 'traced', credentials }, headers: { traceparent: traceparent(T0, spanId()) } });
    expect(created.status, await created.clone().text()).toBe(201);
    const account = (await created.json()) as { id: number; token_version: number };

    const [T1, P1] = [traceId(), spanId()];
    const run = await cluster.api(0, '/jobs/token_refresh/run', { method: 'POST', headers: { traceparent: traceparent(T1, P1) } });
    expect(run.status, await run.clone().text()).toBe(202);
    const started = (await run.json()) as { run_id: number; fencing_token: number };
    // The round arms the account's timer; the refresh fires on it, outside the round.
    await waitFor(async () => ((await (await cluster.api(0, `/accounts/${account.id}`)).json()) as { token_version: number }).token_version > account.token_version, {
      what: 'the scheduled refresh the manual round armed',
      timeoutMs: 120_000,
    });
    // A cluster-scoped round: lock and fencing token.
    const cleanup = await cluster.api(0, '/jobs/idempotency_cleanup/run', { method: 'POST' });
    expect(cleanup.status, await cleanup.clone().text()).toBe(202);
    const cleanupRun = (await cleanup.json()) as { run_id: number; fencing_token: number };
    await waitFor(async () => ((await (await cluster.api(0, `/jobs/idempotency_cleanup/runs/${cleanupRun.run_id}`)).json()) as { run: { status: string } }).run.status !== 'running', {
      what: 'the idempotency_cleanup round to end',
    });

    const T2 = traceId();
    const refreshed = await cluster.api(0, `/accounts/${account.id}/refresh`, { method: 'POST', headers: { traceparent: traceparent(T2, spanId()) } });
    expect(refreshed.status, await refreshed.clone().text()).toBe(200);
    expect(((await refreshed.json()) as { result: string }).result).toBe('refreshed');
    // A caller that did not sample its trace: parent-based sampling exports nothing of it.
    const T3 = traceId();
    expect((await fetch(cluster.replicas[0]!.url('/healthz'), { headers: { traceparent: traceparent(T3, spanId(), false) } })).status).toBe(200);

    // SIGTERM: the ladder's last rung flushes what the exporter holds.
    cluster.replicas[0]!.proc.proc.kill('SIGTERM');
    expect(await cluster.replicas[0]!.proc.exitedWithin(120_000)).toBe(0);

    expect(receiver.refused).toEqual([]);
    expect(receiver.exports.length).toBeGreaterThan(0);
    for (const e of receiver.exports) {
      expect(e.path).toBe('/v1/traces');
      expect(e.contentType).toBe('application/x-protobuf');
      expect(e.headers['x-collector-key']).toBe(COLLECTOR_KEY);
      // Never a secret: not the admin token, not a token of the account, not the exporter's own header.
      const raw = e.raw.toString('latin1');
      for (const secret of [CLUSTER_ADMIN_TOKEN, credentials.access_token, credentials.refresh_token, oauth.liveTokenOf('traced'), COLLECTOR_KEY, 'Bearer']) expect(raw).not.toContain(secret);
    }
    for (const s of receiver.spans) {
      expect(s.resource['service.name']).toBe('relay-jobs-e2e');
      expect(s.resource['service.instance.id']).toBe('tr0');
      expect(Object.keys(s.attributes).filter((k) => /authorization|cookie|access_token|refresh_token|query|url\.full/i.test(k))).toEqual([]);
    }

    // A POST with a JSON body keeps the caller's trace through the body's parsing.
    const create = only(
      receiver.spans.filter((s) => s.traceId === T0 && s.name === 'POST /api/v1/accounts'),
      'the account create request',
    );
    expect(create.attributes['http.response.status_code']).toBe(201);

    const request = only(
      receiver.spans.filter((s) => s.traceId === T1),
      'the manual run request, alone in the caller trace',
    );
    expect(request).toMatchObject({ name: 'POST /api/v1/jobs/:name/run', parentSpanId: P1, kind: 2 });
    expect(request.attributes).toMatchObject({ 'http.request.method': 'POST', 'http.route': '/api/v1/jobs/:name/run', 'http.response.status_code': 202 });

    const round = only(
      receiver.named('round token_refresh').filter((s) => s.links.some((l) => l.traceId === T1)),
      'the manual round',
    );
    expect(round.links).toContainEqual({ traceId: T1, spanId: request.spanId });
    expect(round.parentSpanId).toBe('');
    expect(round.traceId).not.toBe(T1);
    expect(round.attributes).toMatchObject({
      'relay_jobs.job': 'token_refresh',
      'relay_jobs.trigger': 'manual',
      'relay_jobs.run_id': started.run_id,
      'relay_jobs.outcome': 'ok',
      'relay_jobs.items': 1,
      'relay_jobs.lock_backend': 'none',
    });

    const refresh = only(
      receiver.named('token refresh').filter((s) => s.links.some((l) => l.spanId === round.spanId)),
      'the refresh the round armed',
    );
    expect(refresh.links).toContainEqual({ traceId: round.traceId, spanId: round.spanId });
    expect(refresh.attributes).toMatchObject({ 'relay_jobs.account_id': account.id, 'relay_jobs.platform': 'openai', 'relay_jobs.outcome': 'refreshed', 'relay_jobs.trigger': 'schedule' });

    const cleanupRound = only(
      receiver.named('round idempotency_cleanup').filter((s) => s.attributes['relay_jobs.run_id'] === cleanupRun.run_id),
      'the idempotency_cleanup round',
    );
    expect(cleanupRound.attributes).toMatchObject({ 'relay_jobs.trigger': 'manual', 'relay_jobs.fencing_token': cleanupRun.fencing_token, 'relay_jobs.lock_backend': 'redis' });
    expect(cleanupRound.attributes['relay_jobs.slot']).toEqual(expect.any(String));

    // The admin refresh runs inside its request: the same trace, a child of the request's span.
    const adminRequest = only(
      receiver.spans.filter((s) => s.traceId === T2 && s.name === 'POST /api/v1/accounts/:id/refresh'),
      'the admin refresh request',
    );
    const adminRefresh = only(
      receiver.spans.filter((s) => s.traceId === T2 && s.name === 'token refresh'),
      'the admin refresh',
    );
    expect(adminRefresh.parentSpanId).toBe(adminRequest.spanId);
    expect(adminRefresh.attributes).toMatchObject({ 'relay_jobs.trigger': 'admin', 'relay_jobs.outcome': 'refreshed', 'relay_jobs.platform': 'openai' });

    expect(receiver.spans.filter((s) => s.traceId === T3)).toEqual([]);
  });
});

const QUERY_SECRET = 'otlp-query-secret-0123';
describe('traces over OTLP/HTTP JSON to a traces-specific endpoint, from an embedded replica', () => {
  let receiver: OtlpReceiver;
  let cluster: Cluster;

  beforeAll(async () => {
    receiver = await OtlpReceiver.start();
    cluster = await startCluster({
      replicas: ['te0'],
      database: 'none',
      redis: 'none',
      env: {
        RELAY_JOBS_DATA_DIR: embeddedDataDir(),
        // A secret in the endpoint's query (a collector key some vendors take there) never reaches the log.
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/custom/traces?api_key=${QUERY_SECRET}`,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
        OTEL_BSP_SCHEDULE_DELAY: '200',
      },
    });
  });
  afterAll(async () => {
    await cluster?.stop();
    await receiver?.close();
  });

  it('exports while running, named by the route template', async () => {
    const [T, P] = [traceId(), spanId()];
    const res = await cluster.api(0, '/jobs?secret_looking=abc123', { headers: { traceparent: traceparent(T, P) } });
    expect(res.status).toBe(200);
    const span = await waitFor(() => receiver.spans.find((s) => s.traceId === T), { what: 'the request span at the receiver', timeoutMs: 60_000 });
    expect(span).toMatchObject({ name: 'GET /api/v1/jobs', parentSpanId: P, kind: 2 });
    expect(span.attributes['http.response.status_code']).toBe(200);
    expect(span.resource['service.name']).toBe('relay-jobs');
    expect(receiver.refused).toEqual([]);
    for (const e of receiver.exports) {
      expect(e).toMatchObject({ path: `/custom/traces?api_key=${QUERY_SECRET}`, contentType: 'application/json' });
      expect(e.raw.toString('utf8')).not.toContain('abc123');
    }
    const log = cluster.replica(0).lines.join('\n');
    expect(log).toMatch(/tracing on: exporting spans over OTLP\/HTTP/);
    expect(log).toContain('api_key=***');
    expect(log).not.toContain(QUERY_SECRET);
  });
});

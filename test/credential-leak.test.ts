import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openaiProvider } from './helpers/providers.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { WebhookChannel } from '../src/areas/notifications/channels.js';
import { GenericJsonProvider } from '../src/areas/billing/payment-provider.js';
import { ImageProvider } from '../src/areas/images/image-provider.js';
import { OAuthClient } from '../src/areas/accounts/oauth-client.js';
import { ProbeClient } from '../src/upstream/probe-client.js';
import { chatTarget } from './helpers/probe-target.js';
import { captureLogs } from './helpers/log-capture.js';
import { TEST_MASTER_KEY, freePort } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';

const USER_SECRET = 'S3cretUserPw77';
const QUERY_SECRET = 'S3cretQueryTok88';
const SECRETS = [USER_SECRET, QUERY_SECRET, 'S3cretHookTok99', 'S3cretPayKey66'];
const noSecret = (text: string) => {
  for (const s of SECRETS) expect(text, `secret ${s} leaked`).not.toContain(s);
};

/** A server that answers every request by resetting the connection (a failure with no reply). */
async function resetServer(): Promise<{ port: number; server: Server }> {
  const server = createServer((req) => req.socket.destroy());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as AddressInfo).port, server };
}

describe('credentials in outgoing URLs (issue 23, item 3)', () => {
  it('a provider URL with user:pass@ is refused at config load, naming each key; the message carries no secret', () => {
    const url = (path: string) => `https://relay:${USER_SECRET}@provider.example${path}`;
    let err: Error | null = null;
    try {
      loadConfig({
        env: {
          RELAY_JOBS_DATA_DIR: '/tmp/unused',
          RELAY_JOBS__PAYMENTS__PROVIDERS__PAY__BASE_URL: url('/pay'),
          RELAY_JOBS__PAYMENTS__PROVIDERS__PAY__WEBHOOK_SECRET: 'w'.repeat(16),
          RELAY_JOBS__NOTIFY__WEBHOOK__URL: url('/hook'),
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: url('/token'),
          RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: url('/v1'),
          RELAY_JOBS__CHANNEL_MONITOR__ACCOUNT_BASE_URL: url(''),
        },
      });
    } catch (e) {
      err = e as Error;
    }
    expect(err).not.toBeNull();
    for (const key of ['payments.providers.pay.base_url', 'notify.webhook.url', 'oauth.providers.openai.token_url', 'image.provider.base_url'])
      expect(err!.message).toMatch(new RegExp(`${key.replace(/\./g, '\\.')} \\([^)]*\\): must not carry credentials`));
    expect(err!.message).toMatch(/put the secret in payments\.providers\.<name>\.api_key instead/);
    noSecret(err!.message);
  });

  it("every client's failure text is scrubbed: fetch refuses a user:pass@ URL and quotes it, the clients pass on neither secret", async () => {
    const { port, server } = await resetServer();
    try {
      const url = (path: string) => `http://relay:${USER_SECRET}@127.0.0.1:${port}${path}?token=${QUERY_SECRET}`;
      const texts: string[] = [];
      texts.push(
        await new WebhookChannel({ url: url('/hook') }, 2000).send({ to: 'x', subject: 's', text: 't', messageId: 'm', dedupKey: 'k' }).then(
          () => 'sent',
          (e: Error) => e.message,
        ),
      );
      texts.push(
        await new GenericJsonProvider('p', { base_url: url('/pay'), webhook_secret: 'w'.repeat(16) }, 2000, 300_000).queryOrder('o').then(
          () => 'ok',
          (e: Error) => e.message,
        ),
      );
      texts.push(
        await new ImageProvider({ baseUrl: url('/v1'), apiKey: () => 'k', timeoutMs: 2000 }).get('b').then(
          () => 'ok',
          (e: Error) => e.message,
        ),
      );
      const oauth = new OAuthClient();
      const r = await oauth.refresh(openaiProvider({ tokenUrl: url('/token'), clientId: 'c' }), 'rt', {
        proxyUrl: `http://u:${USER_SECRET}@127.0.0.1:${port}`,
        timeoutMs: 2000,
        replyTimeoutMs: 120_000,
        nowMs: () => Date.now(),
      });
      await oauth.close();
      texts.push(JSON.stringify(r));
      const probe = new ProbeClient();
      texts.push(JSON.stringify(await probe.probe(chatTarget({ baseUrl: url(''), model: 'm', apiKey: 'k', timeoutMs: 2000 }))));
      await probe.close();
      // Each failed, and says so.
      expect(texts[0]).toMatch(/webhook unreachable/);
      expect(texts[1]).toMatch(/payment provider p: unreachable/);
      expect(texts[2]).toMatch(/image provider: GET \/batches\/b: unreachable/);
      expect(texts[3]).toMatch(/"kind":"transient"/);
      expect(texts[4]).toMatch(/"ok":false/);
      noSecret(texts.join('\n'));
    } finally {
      server.closeAllConnections();
      server.close();
    }
  }, 60_000);

  describe('in a running service (embedded)', () => {
    let rt: Runtime;
    let http: FastifyInstance;
    let reset: { port: number; server: Server };
    let dataDir: string;
    const logs = captureLogs('leak', 'debug');
    const auth = { authorization: `Bearer ${'a'.repeat(32)}` };

    beforeAll(async () => {
      reset = await resetServer();
      dataDir = embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-leak-')));
      const config = loadConfig({
        env: {
          RELAY_JOBS_DATA_DIR: dataDir,
          RELAY_JOBS_HTTP_PORT: String(await freePort()),
          RELAY_JOBS_ADMIN_TOKEN: 'a'.repeat(32),
          RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
          RELAY_JOBS__PAYMENTS__PROVIDERS__LEAKY__BASE_URL: `http://127.0.0.1:${reset.port}/pay?api_key=S3cretPayKey66`,
          RELAY_JOBS__PAYMENTS__PROVIDERS__LEAKY__WEBHOOK_SECRET: 'w'.repeat(16),
          RELAY_JOBS__NOTIFY__WEBHOOK__URL: `http://127.0.0.1:${reset.port}/hook?token=S3cretHookTok99`,
          RELAY_JOBS__NOTIFY__SEND_TIMEOUT: '2s',
        },
      });
      rt = await Runtime.create(config, { logger: logs.logger });
      http = buildHttpServer(rt);
      await http.ready();
    }, 240_000);
    afterAll(async () => {
      await rt?.shutdown();
      await http?.close();
      reset.server.closeAllConnections();
      reset.server.close();
      rmSync(dataDir, { recursive: true, force: true });
    });

    it('payment and webhook failures: the secrets are in no log line, no API response, no table row', async () => {
      const user = (await http.inject({ method: 'POST', url: '/api/v1/billing/users', headers: auth, payload: { email: 'leak@example.test' } })).json();
      const order = await http.inject({
        method: 'POST',
        url: '/api/v1/billing/orders',
        headers: auth,
        payload: { user_id: user.id, amount: 100, provider: 'leaky', purpose: 'balance', expires_at: new Date(Date.now() - 1000).toISOString() },
      });
      expect(order.statusCode, order.body).toBe(201);
      await rt.db.query(`INSERT INTO notification_deliveries (dedup_key, channel, recipient, template, params) VALUES ('leak:1', 'webhook', 'ops', 'ops_alert', '{}'::jsonb)`);
      await rt.runNow('payment_order_expiry');
      await rt.runNow('ops_alert_evaluator');
      const delivery = (await rt.db.query(`SELECT attempts, last_error FROM notification_deliveries WHERE dedup_key = 'leak:1'`)).rows[0]!;
      expect(delivery).toMatchObject({ attempts: 1, last_error: expect.stringMatching(/webhook unreachable/) });

      const responses = [];
      for (const url of ['/api/v1/notifications/channels', '/api/v1/notifications', '/api/v1/jobs', '/api/v1/jobs/payment_order_expiry/runs', '/api/v1/billing/orders', '/api/v1/doctor']) {
        const r = await http.inject({ url, headers: auth });
        responses.push(`${url} ${r.statusCode} ${r.body}`);
      }
      expect(responses.join('\n')).toMatch(/"up":false/);
      const tables = (await rt.db.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)).rows.map((r) => String(r.table_name));
      let rows = '';
      for (const t of tables) rows += String((await rt.db.query(`SELECT coalesce(string_agg(x::text, E'\\n'), '') AS t FROM "${t}" x`)).rows[0]!.t) + '\n';
      expect(tables.length).toBeGreaterThan(20);
      expect(rows).toMatch(/webhook unreachable/);
      noSecret(logs.text());
      noSecret(responses.join('\n'));
      noSecret(rows);
    }, 120_000);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { waitFor } from './helpers/wait.js';

/**
 * The hot path's token cache across three real replicas (issue 53): a disabled account is never
 * served by any replica once the disable call has returned; new credentials and a refresh reach
 * every replica's answers. Each replica's cache is shown to be answering from memory first
 * (`relay_jobs_token_cache_total{result="hit"}` rising), so the assertions are about the cache.
 */
describe('token cache: three replicas', () => {
  let cluster: Cluster;
  let oauth: FakeOAuthServer;
  let id: number;

  beforeAll(async () => {
    oauth = await FakeOAuthServer.start({ clientId: 'e2e-cache', lifetimeSec: 86_400, rotate: true, sendExpiresIn: true });
    cluster = await startCluster({
      replicas: 3,
      idPrefix: 'tc',
      env: {
        RELAY_JOBS__AUTH__REFRESH_ENABLED: 'false',
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'e2e-cache',
      },
    });
    await Promise.all(cluster.replicas.map((r) => r.proc.waitForLine(/wake-up listener on the liveness session/)));
    const c = oauth.issue('cached');
    const res = await cluster.api(0, '/accounts', {
      body: { platform: 'openai', name: 'cached', credentials: { access_token: c.access_token, refresh_token: c.refresh_token, expires_at: new Date(Date.now() + 86_400_000).toISOString() } },
    });
    expect(res.status, await res.clone().text()).toBe(201);
    id = Number(((await res.json()) as { id: number }).id);
  }, 240_000);

  afterAll(async () => {
    await cluster?.stop();
    await oauth?.close();
  });

  const token = (replica: number) => cluster.api(replica, `/accounts/${id}/token`, { method: 'POST' });
  async function hits(replica: number): Promise<number> {
    const text = await (await fetch(cluster.replica(replica).url('/metrics'))).text();
    return Number(/^relay_jobs_token_cache_total\{result="hit"\} (\d+)/m.exec(text)?.[1] ?? 0);
  }
  /** Until the replica answers 200 from its cache (its hit counter moves on a token call). */
  async function warm(replica: number) {
    await waitFor(
      async () => {
        const before = await hits(replica);
        const res = await token(replica);
        return res.status === 200 && (await hits(replica)) > before;
      },
      { what: `replica ${replica} answering the token from its cache`, intervalMs: 20, timeoutMs: 60_000 },
    );
  }

  /**
   * Token requests to every replica without pause while `fn` runs: they keep each replica's cache
   * fresh (its pings renewed), so what the test sees depends on invalidation, not on a cache gone cold.
   */
  async function underLoad<T>(fn: () => Promise<T>): Promise<T> {
    let stop = false;
    const loops = [0, 1, 2].map(async (r) => {
      while (!stop) await (await token(r)).arrayBuffer();
    });
    try {
      return await fn();
    } finally {
      stop = true;
      await Promise.all(loops);
    }
  }

  it('a disable acknowledged on one replica is never served by the others, however warm their caches', async () => {
    for (let round = 0; round < 3; round++) {
      const disabler = round % 3;
      await Promise.all([0, 1, 2].map(warm));
      const res = await underLoad(() => cluster.api(disabler, `/accounts/${id}/disable`, { body: {} }));
      expect(res.status).toBe(200);
      for (const other of [0, 1, 2].filter((r) => r !== disabler)) {
        const answer = await underLoad(() => token(other));
        const body = (await answer.json()) as { error?: { code: string }; access_token?: string };
        expect(answer.status, `round ${round}: replica ${other} after the disable on ${disabler}`).toBe(409);
        expect(body.error?.code).toBe('unavailable');
        expect(body.access_token).toBeUndefined();
      }
      expect((await cluster.api(disabler, `/accounts/${id}/enable`, { body: {} })).status).toBe(200);
    }
  }, 180_000);

  it('new credentials set on one replica are what the others answer once the call returns', async () => {
    await Promise.all([0, 1, 2].map(warm));
    const c = oauth.issue('replaced');
    await underLoad(async () => {
      const res = await cluster.api(1, `/accounts/${id}`, {
        method: 'PATCH',
        body: { credentials: { access_token: c.access_token, refresh_token: c.refresh_token, expires_at: new Date(Date.now() + 86_400_000).toISOString() } },
      });
      expect(res.status).toBe(200);
      for (const other of [0, 2]) expect(((await (await token(other)).json()) as { access_token: string }).access_token).toBe(c.access_token);
    });
  }, 120_000);

  it('after a refresh on one replica the others answer the new token', async () => {
    await Promise.all([0, 1, 2].map(warm));
    await underLoad(async () => {
      const res = await cluster.api(2, `/accounts/${id}/refresh`, { body: {} });
      const r = (await res.json()) as { result: string; account: { token_version: number } };
      expect(r.result).toBe('refreshed');
      for (const other of [0, 1])
        await waitFor(async () => ((await (await token(other)).json()) as { token_version: number }).token_version === r.account.token_version, {
          what: `replica ${other} answering token version ${r.account.token_version}`,
          timeoutMs: 30_000,
        });
    });
  }, 120_000);
});

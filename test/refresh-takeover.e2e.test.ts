import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startCluster, type Cluster, type Replica } from './helpers/cluster.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { importAccounts, notHealthy, startReplica, waitFor, watchLapses } from './helpers/refresh-cluster.js';

/**
 * Issue 29, with real processes: three replicas share 45 accounts whose tokens live 22–36 s
 * (refreshed 20 s before expiry) and whose refresh tokens are single-use; the token endpoint
 * takes 1.5 s, drops a request whose client died while it waited, and accepts a just-rotated
 * token once more within 30 s. One replica is SIGKILLed while it has a request at the endpoint,
 * three times, each restarted under a new instance id; the next kill comes once the previous
 * one's requests were taken over and its replacement has started. The refresh lease TTL stays at
 * its 5-minute default: only the liveness takeover can save the dead replica's accounts in time.
 * Lapses are watched until every account has been refreshed after the last kill. At the end
 * every account is active with a valid token, none lapsed on the way, no refresh token was
 * presented twice outside the provider's grace, and the takeover time is reported.
 */
const ACCOUNTS = 45;
const lifeOf = (i: number) => 22 + (i % 15);

describe('a replica that dies mid-refresh', () => {
  let cluster: Cluster;
  let oauth: FakeOAuthServer;
  let sql: pg.Client;

  beforeAll(async () => {
    cluster = await startCluster({ replicas: 0 });
    oauth = await FakeOAuthServer.start({
      clientId: 'e2e-client',
      delayMs: 1500,
      dropIfClientGone: true,
      reuseGraceMs: 30_000,
      lifetimeOf: (subject) => lifeOf(Number(subject.split('-')[1])),
    });
    sql = await cluster.sql();
  });
  afterAll(async () => {
    await cluster?.stop();
    await oauth?.close();
  });

  it('its refreshes are taken over within seconds and every account stays valid through three SIGKILLs', async () => {
    const env = {
      RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
      RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'e2e-client',
      RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__MAX_PER_SECOND: '500',
      RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__REUSE_GRACE: '30s',
      RELAY_JOBS__AUTH__REFRESH_MARGIN_SECONDS: '20',
      RELAY_JOBS__AUTH__REFRESH_CONCURRENCY: '8',
      RELAY_JOBS__AUTH__REFRESH_BACKOFF_BASE: '2s',
    };
    const live: Replica[] = [];
    for (let i = 0; i < 3; i++) live.push(await startReplica(cluster, `t${i}`, env));
    await Promise.all(live.map((r) => r.proc.waitForLine(/relay-jobs started/)));
    await Promise.all(live.map((r) => r.proc.waitForLine(/"members":\["t0","t1","t2"\]/, 30_000)));

    const accounts = Array.from({ length: ACCOUNTS }, (_, i) => ({ platform: 'openai', name: `acct-${i}`, credentials: oauth.issue(`acct-${i}`, lifeOf(i)) }));
    await importAccounts(cluster, live[0]!, accounts);
    const watcher = watchLapses(sql);
    const kills: Array<{ at: number; victim: string }> = [];
    /** Requests in flight at a kill (the endpoint dropped them once the client was gone). */
    const lostAt = (kill: { at: number }) => oauth.presented.filter((p) => p.outcome === 'dropped' && p.at < kill.at && p.answeredAt! >= kill.at);
    const takenOver = (kill: { at: number }) => lostAt(kill).every((p) => oauth.presented.some((q) => q.subject === p.subject && q.at > kill.at));
    try {
      // Kill a replica three times, each while it has a request at the endpoint, and each as soon as the previous
      // kill's requests were taken over; each comes back under a new instance id.
      for (let k = 0; k < 3; k++) {
        const victim = live.shift()!;
        await waitFor(async () => (await sql.query(`SELECT 1 FROM accounts WHERE refresh_sent_at IS NOT NULL AND refresh_sent_by LIKE $1`, [`${victim.id}:%`])).rows.length > 0, {
          timeoutMs: 60_000,
          intervalMs: 100,
          what: `${victim.id} to have a refresh request in flight`,
        });
        const at = Date.now();
        victim.proc.proc.kill('SIGKILL');
        await victim.proc.exited;
        const kill = { at, victim: victim.proc.name };
        kills.push(kill);
        const next = await startReplica(cluster, `t${3 + k}`, env);
        live.push(next);
        // Back to three replicas (as with kills ~21 s apart) before the next kill.
        await next.waitStarted();
        // The endpoint marks a request dropped when its delay ends; then each must be presented again.
        await waitFor(() => Date.now() > at + 2000 && takenOver(kill), {
          timeoutMs: 60_000,
          intervalMs: 100,
          what: () => `the requests ${kill.victim} had in flight to be presented again: ${JSON.stringify(lostAt(kill).map((p) => p.subject))}`,
        });
      }
      // Watched until every account has been refreshed since the last kill (every 2-16 s each): the dead
      // replicas' accounts, in flight or only owned, had to be taken over before their tokens lapsed.
      const last = kills[kills.length - 1]!.at;
      const refreshedSince = () => new Set(oauth.presented.filter((p) => p.at > last && (p.outcome === 'ok' || p.outcome === 'grace')).map((p) => p.subject));
      await waitFor(() => refreshedSince().size === ACCOUNTS, {
        timeoutMs: 60_000,
        intervalMs: 200,
        what: () => `every account refreshed after the last kill; not yet: ${accounts.map((a) => a.name).filter((n) => !refreshedSince().has(n))}`,
      });
      await waitFor(async () => (await notHealthy(sql, true)).length === 0, {
        timeoutMs: 20_000,
        what: async () => `accounts not active (or refreshing) with a valid token: ${JSON.stringify(await notHealthy(sql, true))}`,
      });
    } finally {
      await watcher.stop();
    }
    // A clean stop stores every refresh under way: then every account is active.
    for (const r of live) r.proc.proc.kill('SIGTERM');
    expect(await Promise.all(live.map((r) => r.proc.exited))).toEqual([0, 0, 0]);
    expect(await notHealthy(sql), 'accounts not active with a valid token after the replicas stopped').toEqual([]);

    // Takeover: for each request a dead replica had in flight (the endpoint dropped it when the
    // client died), the time from the kill to the next request for that account.
    const takeovers: number[] = [];
    for (const kill of kills) {
      for (const p of lostAt(kill)) {
        const next = oauth.presented.find((q) => q.subject === p.subject && q.at > kill.at);
        takeovers.push(next ? next.at - kill.at : Infinity);
      }
    }
    const graceUses = oauth.presented.filter((p) => p.outcome === 'grace').length;
    const worst = Math.max(0, ...takeovers);
    console.log(
      `refresh takeover e2e: ${oauth.successes} refreshes, ${kills.length} kills, ${takeovers.length} requests in flight at a kill, ` +
        `takeover after ${takeovers.map((t) => (t / 1000).toFixed(1)).join(', ')} s (worst ${(worst / 1000).toFixed(1)} s, goal < 5 s), ` +
        `${graceUses} rotated tokens accepted again within the provider's grace, ${watcher.lapsed.size} tokens lapsed`,
    );

    expect(oauth.reuses, 'a refresh token presented twice outside the provider’s grace').toBe(0);
    expect([...watcher.lapsed], 'a token outlived its life (account id, ms past expiry)').toEqual([]);
    // Every dead replica's request was taken over; well under the 5-minute lease (the goal, < 5 s, is reported above).
    expect(takeovers.filter((t) => t > 15_000)).toEqual([]);
    const { rows } = await sql.query(`SELECT count(*)::int AS n FROM accounts WHERE refresh_sent_at IS NOT NULL`);
    expect(rows[0].n, 'a request recorded as in flight outlived its answer').toBe(0);
  }, 200_000);
});

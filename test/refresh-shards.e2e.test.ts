import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Redis } from 'ioredis';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { REFRESH_ENV } from './helpers/refresh-cluster.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { RefreshShards } from '../src/areas/accounts/refresh-shards.js';
import { waitFor, pace } from './helpers/wait.js';

/**
 * Refresh sharding with real processes: three replicas share 150 accounts whose tokens live
 * 16 s (refreshed 8 s before expiry), so each replica refreshes about a third of them and the
 * others do not even try: lease attempts per refresh stay about one. Then one replica is
 * SIGKILLed: the survivors must drop it from their shard maps within the 3 s heartbeat timeout
 * (heartbeat 1 s) and refresh every account it owned, none left waiting for the backstop, with
 * no token lapsing for long. Accounts the dead replica was refreshing at that instant are left to
 * their lease (they are the crash's own loss, counted apart).
 *
 * 150 accounts (300 before): about 450 refreshes before the kill and as many after still make
 * the per-refresh lease-attempt ratio exact to a percent, and the dead replica owns about 50
 * accounts whose takeover is checked one by one, at half the refresh work.
 */
const ACCOUNTS = 150;
const LIFETIME_S = 16;
const SCHEDULED = /relay_jobs_token_refresh_lease_attempts_total\{trigger="(schedule|retry|recovery)"\} (\d+)/g;

describe('refresh sharding across three real replicas', () => {
  let cluster: Cluster;
  let oauth: FakeOAuthServer;
  let sql: pg.Client;

  beforeAll(async () => {
    oauth = await FakeOAuthServer.start({ lifetimeSec: LIFETIME_S, clientId: 'e2e-client' });
    cluster = await startCluster({
      replicas: ['s0', 's1', 's2'],
      waitStarted: false,
      env: {
        ...REFRESH_ENV,
        RELAY_JOBS__DATABASE__POOL_SIZE: '6',
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'e2e-client',
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__MAX_PER_SECOND: '500',
        RELAY_JOBS__AUTH__REFRESH_MARGIN_SECONDS: '8',
        RELAY_JOBS__AUTH__REFRESH_CONCURRENCY: '8',
        RELAY_JOBS__AUTH__REFRESH_LEASE_TTL: '4s',
      },
    });
    sql = await cluster.sql();
  });
  afterAll(async () => {
    await cluster?.stop();
    await oauth?.close();
  });

  const scheduledAttempts = async (i: number): Promise<number> => {
    const text = await (await fetch(cluster.replica(i).url('/metrics'))).text();
    return [...text.matchAll(SCHEDULED)].reduce((n, m) => n + Number(m[2]), 0);
  };

  it('about one lease attempt per refresh, and a dead replica’s accounts refreshed before they lapse', async () => {
    const replicas = cluster.replicas.map((r) => r.proc);
    await Promise.all(replicas.map((r) => r.waitForLine(/relay-jobs started/, 60_000)));
    // Every replica has seen all three before the accounts arrive (the shard map comes with the heartbeat).
    await Promise.all(replicas.map((r) => r.waitForLine(/"members":\["s0","s1","s2"\]/, 30_000)));

    const accounts = Array.from({ length: ACCOUNTS }, (_, i) => ({ platform: 'openai', name: `acct-${i}`, credentials: oauth.issue(`acct-${i}`, 10 + (i % 7)) }));
    const imported = await cluster.api(0, '/accounts/import', { body: { accounts } });
    expect(imported.status, await imported.clone().text()).toBe(201);

    // Watch every account's expiry from the database four times a second for the whole run.
    const lapsed = new Map<number, number>();
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const { rows } = await sql.query<{ id: number; lapsed_ms: number }>(
          `SELECT id, (extract(epoch FROM clock_timestamp() - token_expires_at) * 1000)::float8 AS lapsed_ms FROM accounts WHERE token_expires_at < clock_timestamp()`,
        );
        for (const r of rows) lapsed.set(r.id, Math.max(lapsed.get(r.id) ?? 0, r.lapsed_ms));
        await pace(250); // the lapse sampler's spacing
      }
    })();

    // A refresh cycle and a half on three replicas.
    const firstCycles = ACCOUNTS * 1.5;
    await waitFor(() => oauth.successes >= firstCycles, { timeoutMs: 60_000, what: () => `${oauth.successes} refreshes` });
    const attemptsOfDead = await scheduledAttempts(2);
    const beforeKill = oauth.successes;
    replicas[2]!.proc.kill('SIGKILL');
    await replicas[2]!.exited;
    const killedAt = Date.now();
    // The crash's own loss: accounts the dead replica held a refresh lock or lease on at the kill
    // (they wait for auth.refresh_lease_ttl, as after any crash mid-refresh).
    const { rows: held } = await sql.query<{ account_id: number }>(`SELECT account_id FROM account_refresh_leases WHERE owner LIKE 's2:%'`);
    const inFlight = new Set(held.map((r) => Number(r.account_id)));
    const redis = new Redis(cluster.redis!.url);
    for (const key of await redis.keys(`${cluster.prefix}:e2e:oauth:refresh_lock:*`)) if ((await redis.get(key))?.startsWith('s2:')) inFlight.add(Number(/\{(\d+)\}/.exec(key)![1]));
    redis.disconnect();
    const versionAtKill = new Map((await sql.query<{ id: number; token_version: number }>('SELECT id, token_version FROM accounts')).rows.map((r) => [Number(r.id), Number(r.token_version)]));

    // As many again on the two survivors.
    await waitFor(() => oauth.successes >= beforeKill + ACCOUNTS * 1.5, { timeoutMs: 60_000, what: () => `${oauth.successes - beforeKill} refreshes since the kill` });
    watching = false;
    await watcher;
    // The snapshot above races with the survivors: on a loaded machine a survivor may already have taken a dead
    // holder's lease over before it is read. A request the dead replica had sent is also found by the survivor
    // that takes the account over (it logs the unanswered send, naming the sender): those are the crash's loss too.
    for (const r of replicas.slice(0, 2))
      for (const l of r.lines) if (l.includes('a refresh sent earlier was never answered') && l.includes('"sent_by":"s2:')) inFlight.add(Number(JSON.parse(l).account_id));
    const attempts = attemptsOfDead + (await scheduledAttempts(0)) + (await scheduledAttempts(1));
    const refreshes = oauth.successes;

    for (const r of replicas.slice(0, 2)) r.proc.kill('SIGTERM');
    expect(await Promise.all(replicas.slice(0, 2).map((r) => r.exited))).toEqual([0, 0]);

    // A request the dead replica had sent may have rotated a token it never stored: only those may be reused.
    const names = new Map((await sql.query<{ id: number; name: string }>('SELECT id, name FROM accounts')).rows.map((r) => [r.name, Number(r.id)]));
    expect(
      oauth.reusedBy.filter((name) => !inFlight.has(names.get(name)!)),
      'a refresh token was presented twice',
    ).toEqual([]);
    // The survivors' shard maps dropped the dead replica within the heartbeat timeout (3 × 1 s):
    // from then on its accounts have an owner again.
    const dropped = replicas.slice(0, 2).map((r) => r.lines.map((l) => (l.includes('"members":["s0","s1"]') ? Date.parse(JSON.parse(l).time) : NaN)).find((t) => t >= killedAt - 1000));
    for (const t of dropped) expect(t! - killedAt, 'a survivor still counted the dead replica as an owner').toBeLessThan(3000);
    // Every account the dead replica owned was refreshed by its new owner (none waited for the backstop).
    const before = new RefreshShards('x');
    before.update(['s0', 's1', 's2']);
    const versionNow = new Map((await sql.query<{ id: number; token_version: number }>('SELECT id, token_version FROM accounts')).rows.map((r) => [Number(r.id), Number(r.token_version)]));
    const orphans = [...versionAtKill].filter(([id, v]) => before.owner(id) === 's2' && !inFlight.has(id) && versionNow.get(id)! <= v).map(([id]) => id);
    expect(orphans, 'accounts of the dead replica never refreshed after the kill').toEqual([]);
    expect([...versionAtKill.keys()].filter((id) => before.owner(id) === 's2').length).toBeGreaterThan(ACCOUNTS / 6);
    // No token lapsed for long (a gap of half a token's life would mean nobody owned it), each lapse
    // named with its owner before the kill and what the logs say of it. Short lapses can only come
    // from a loaded machine delaying an owner, and are reported, not failed.
    const report = [...lapsed]
      .filter(([id]) => !inFlight.has(id))
      .map(
        ([id, ms]) =>
          `account ${id} (owned by ${before.owner(id)} before the kill) lapsed ${Math.round(ms)} ms; kill at ${new Date(killedAt).toISOString()}\n` +
          replicas
            .flatMap((r) => r.lines.filter((l) => l.includes(`"account_id":${id},`)).map((l) => `${r.name} ${l}`))
            .slice(-8)
            .join('\n'),
      );
    if (report.length) console.log(report.join('\n'));
    // What sharding must guarantee is that the dead replica's accounts are not left without an owner: they lapse no
    // longer than the survivors' own accounts (whose owner never changed, so their lapses are the machine's load
    // alone) plus the heartbeat timeout (3 s) it takes to drop the dead replica, and never half a token's life more.
    // Under a load average of ~25 on two cores every replica starts refreshes 2-5 s late, so the survivors' own
    // accounts lapsed up to 8.4 s in one run: a fixed half-life bound failed on load, not on ownership.
    const lapseOf = (owned: (owner: string | null) => boolean) => Math.max(0, ...[...lapsed].filter(([id]) => !inFlight.has(id) && owned(before.owner(id))).map(([, ms]) => ms));
    const baseline = lapseOf((owner) => owner !== 's2');
    const bound = Math.max((LIFETIME_S / 2) * 1000, baseline + 3000);
    expect(
      [...lapsed].filter(([id, ms]) => !inFlight.has(id) && before.owner(id) === 's2' && ms >= bound),
      `the dead replica's accounts lapsed ${Math.round(bound)} ms or more (the survivors' own at most ${Math.round(baseline)} ms)\n${report.join('\n')}`,
    ).toEqual([]);
    expect(baseline, `a survivor's own account went a whole token life without a refresh\n${report.join('\n')}`).toBeLessThan(LIFETIME_S * 1000);
    // Each refresh was tried by about one replica: no N× lock traffic (3× without sharding).
    expect(attempts / refreshes).toBeLessThan(1.2);
    console.log(
      `refresh shards e2e: ${refreshes} refreshes, ${attempts} scheduled lease attempts (${(attempts / refreshes).toFixed(3)} per refresh), ${inFlight.size} in flight at the kill, dead replica dropped ${dropped.map((t) => t! - killedAt).join(' and ')} ms after the kill, ${report.length} short lapses (longest ${Math.round(lapseOf((o) => o === 's2'))} ms of the dead replica's accounts, ${Math.round(baseline)} ms of the survivors' own)`,
    );
  }, 180_000);
});

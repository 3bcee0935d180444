import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PgDb } from '../src/store/pg-db.js';
import { SecretBox } from '../src/store/secret-box.js';
import { Accounts } from '../src/areas/accounts/store/accounts.js';
import { TokenReads } from '../src/areas/accounts/store/token-reads.js';
import { TokenCache } from '../src/areas/accounts/token-cache.js';
import { WAKE_DETAIL_CHANNEL } from '../src/coordination/wake-listener.js';
import { TEST_MASTER_KEY, freshDatabase } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { ManualClock } from '../src/time/clock.js';

/**
 * The hot path's token cache against a real PostgreSQL: the migration-039 trigger's notifications
 * and the cache's own freshness pings arrive through a real LISTEN session, as the replica's wake-up
 * listener delivers them (topic `tokens`, its detail after the colon). The session can be told to
 * drop everything it receives, which is what a listener cut off without noticing does.
 */
describe('token cache (real PostgreSQL, LISTEN/NOTIFY)', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let db: PgDb;
  let listener: pg.Client;
  let accounts: Accounts;
  let reads: TokenReads;
  let deliver = true;
  const caches = new Set<TokenCache>();

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    db = await PgDb.connect({ url: fresh.url, poolSize: 4, connectTimeoutMs: 5000 });
    const box = SecretBox.fromBase64(TEST_MASTER_KEY);
    accounts = new Accounts(db, box);
    reads = new TokenReads(db, box);
    listener = new pg.Client({ connectionString: fresh.url });
    await listener.connect();
    listener.on('notification', (n) => {
      if (!deliver || n.channel !== WAKE_DETAIL_CHANNEL || !n.payload?.startsWith('tokens:')) return;
      for (const c of caches) c.onNotification(n.payload.slice('tokens:'.length));
    });
    await listener.query(`LISTEN ${WAKE_DETAIL_CHANNEL}`);
  }, 60_000);

  afterAll(async () => {
    await listener?.end();
    await db?.close();
    await fresh?.drop();
  });

  /** `clock`: the cache's freshness clock, which the test then moves (real monotonic time without it). */
  function cache(maxAgeMs = 100, clock?: ManualClock) {
    const results: string[] = [];
    const now = clock && (() => clock.now());
    const c = new TokenCache(reads, { maxAgeMs, maxEntries: 100, now, listening: () => true, onResult: (r) => results.push(r) });
    caches.add(c);
    return { c, results };
  }

  async function account(name: string) {
    const v = await accounts.create({ platform: 'openai', name, credentials: { access_token: `${name}-v1`, refresh_token: 'rt' }, tokenExpiresAt: new Date(Date.now() + 86_400_000) });
    return v.id;
  }

  /** Reads until the cache answers from memory (its ping came back): without that the other assertions could not fail. */
  async function warm(c: TokenCache, results: string[], id: number) {
    await waitFor(async () => (await c.get(id), results.at(-1) === 'hit'), { what: `account ${id} answered from the cache`, intervalMs: 5, timeoutMs: 30_000 });
  }

  it('answers from memory while fresh, and a committed change reaches it by notification', async () => {
    deliver = true;
    const id = await account('notified');
    const { c, results } = cache();
    await warm(c, results, id);
    expect((await c.get(id))?.accessToken).toBe('notified-v1');
    await accounts.update(id, { credentials: { value: { access_token: 'notified-v2', refresh_token: 'rt' }, tokenExpiresAt: null } });
    await waitFor(async () => (await c.get(id))?.accessToken === 'notified-v2', { what: 'the new token after the notification', intervalMs: 5 });
    // The new token came from memory again once re-read: the cache keeps working after an invalidation.
    await warm(c, results, id);
    expect((await c.get(id))?.accessToken).toBe('notified-v2');
  });

  it('never serves a disabled account once the change is acknowledged, even when every notification is lost', async () => {
    // The cache's clock stands still until the acknowledgment moves it: its freshness, renewed by the
    // last echo, is as recent as it can be at the commit, and only the acknowledgment's wait ends it.
    const clock = new ManualClock();
    const { c, results } = cache(100, clock);
    for (let round = 0; round < 5; round++) {
      deliver = true;
      // Time passes between rounds: the ping that the last round's read sent was lost, and the cache
      // sends its next one only half its age later (without it, no echo could make it fresh).
      await clock.advance(100);
      const id = await account(`lost-${round}`);
      await warm(c, results, id);
      // From here the listener hears nothing (neither the trigger's notification nor the pings) and is not told.
      deliver = false;
      await accounts.update(id, { status: 'disabled' });
      // The acknowledgment (TokenApi.settle, what the disable route awaits): the cache's own bound, on its clock.
      await clock.advance(c.settleMs);
      const after = await c.get(id);
      expect(after?.status, `round ${round}: a disabled account served after its change was acknowledged`).toBe('disabled');
      expect(results.at(-1)).toBe('cold');
    }
    deliver = true;
  });

  it('starts answering from memory again once its pings come back, and forgets everything on a listener event', async () => {
    deliver = true;
    const id = await account('flushed');
    const { c, results } = cache();
    await warm(c, results, id);
    c.onNotification('listener_connected');
    expect(c.size).toBe(0);
    await c.get(id);
    expect(results.at(-1)).toBe('cold');
    await warm(c, results, id);
  });

  it('with token_cache_max_age 0 reads PostgreSQL every time and acknowledges at once', async () => {
    const id = await account('off');
    const { c, results } = cache(0);
    for (let i = 0; i < 3; i++) expect((await c.get(id))?.accessToken).toBe('off-v1');
    expect(results).toEqual([]);
    expect(c.settleMs).toBe(0);
  });

  it('acknowledges after the largest cache age any replica announced in its pings, not only its own', async () => {
    const id = await account('peers');
    const { c: short } = cache(0);
    const { c: long, results } = cache(400);
    expect(short.settleMs).toBe(0);
    // The 400 ms replica serves from memory only after its own ping came back; that ping reached the other replica too.
    await warm(long, results, id);
    expect(short.settleMs).toBe(405);
    expect(long.settleMs).toBe(405);
  });
});

import { randomBytes } from 'node:crypto';
import type { TokenReads, TokenRow } from './store/token-reads.js';
import { monotonic } from '../../time/wall.js';

/**
 * The hot path's token cache (issue 53): one replica's copy of what `POST accounts/{id}/token`
 * answers, so a fresh token costs no PostgreSQL round trip. The design note, in full, is
 * docs/token-refresh.md ("The hot path's token cache"); in short:
 *
 * - Invalidation: a trigger on `accounts` notifies `tokens:<id>` in the writing transaction
 *   (migration 039), on the wake-up channel every replica LISTENs to. Entries of that id are
 *   dropped, and loads of it in flight are marked so their (possibly older) rows are not kept.
 * - Lost notifications: an entry is served only while this replica is *fresh*: an echo of its own
 *   ping, sent at `s`, came back and `now < s + maxAge`. PostgreSQL delivers notifications to a
 *   listener in commit order, so the echo proves that every change committed before `s` was
 *   delivered and applied. A listener that is down or silently cut off stops the echoes, and the
 *   cache stops serving within `maxAge`. Pings are sent only while requests come (one per half
 *   `maxAge`), so an idle replica costs nothing.
 * - Acknowledgment: a change that must stop a token being served (disable, new credentials)
 *   returns to its caller only `maxAge` after it committed (`settle`): by then no replica's cache
 *   can serve what it read before the commit, whatever notifications were lost.
 * - A load joins another in flight only if that one started less than `maxAge` ago, so a request
 *   never gets a row read before a change acknowledged before it arrived.
 */
export interface TokenCacheOptions {
  /** `auth.token_cache_max_age`: 0 turns the cache off (every request reads PostgreSQL). */
  maxAgeMs: number;
  /** Entries kept; the oldest is dropped beyond it. */
  maxEntries: number;
  /** A monotonic clock in ms: freshness must not move with the wall clock. */
  now?: () => number;
  /** Whether the replica's wake-up listener is up (`WakeHub.listening`). */
  listening: () => boolean;
  onResult?: (result: 'hit' | 'miss' | 'cold') => void;
}

/** How long a peer's announced cache age is remembered: far longer than any age a replica may be configured with (at most 10 s). */
const PEER_MEMORY_MS = 60_000;

interface Load {
  startedAt: number;
  stale: boolean;
  row: Promise<TokenRow | null>;
}

export class TokenCache {
  private readonly entries = new Map<number, TokenRow>();
  /** Loads in flight by account: every one of them (for marking), the newest to join. */
  private readonly loads = new Map<number, Set<Load>>();
  private readonly joinable = new Map<number, Load>();
  private readonly nonce = randomBytes(6).toString('hex');
  private seq = 0;
  private readonly pings = new Map<number, number>();
  /** Send time of the newest ping whose echo came back (-Infinity: not fresh). */
  private freshFrom = -Infinity;
  private pingSentAt = -Infinity;
  private readonly now: () => number;
  /** Peers' announced cache ages by their nonce (`settleMs`). */
  private readonly peers = new Map<string, { maxAgeMs: number; at: number }>();

  constructor(
    private readonly reads: TokenReads,
    private readonly o: TokenCacheOptions,
  ) {
    this.now = o.now ?? monotonic;
  }

  get enabled(): boolean {
    return this.o.maxAgeMs > 0;
  }

  /** The account's token row: from memory while fresh, else read (joining a recent read of the same account). */
  async get(id: number): Promise<TokenRow | null> {
    if (!this.enabled) return this.reads.load(id);
    const now = this.now();
    const fresh = this.isFresh(now);
    this.renew(now);
    if (fresh) {
      const hit = this.entries.get(id);
      if (hit) {
        this.o.onResult?.('hit');
        return hit;
      }
    }
    this.o.onResult?.(fresh ? 'miss' : 'cold');
    const recent = this.joinable.get(id);
    if (recent && now - recent.startedAt < this.o.maxAgeMs) return recent.row;
    return this.load(id, now);
  }

  /** Drops what this replica knows of `id` (a notification, or a change this replica made). */
  invalidate(id: number): void {
    this.entries.delete(id);
    this.joinable.delete(id);
    for (const l of this.loads.get(id) ?? []) l.stale = true;
  }

  /** Forgets everything and is not fresh until a new echo (the listener went down or came back). */
  flush(): void {
    this.entries.clear();
    this.joinable.clear();
    for (const set of this.loads.values()) for (const l of set) l.stale = true;
    this.freshFrom = -Infinity;
    this.pings.clear();
    this.pingSentAt = -Infinity;
  }

  /** What a wake-up of the `tokens` topic says: `<id>`, `ping:<nonce>:<seq>`, or a listener event (flush). */
  onNotification(detail: string): void {
    if (/^\d+$/.test(detail)) return this.invalidate(Number(detail));
    const m = /^ping:([0-9a-f]+):(\d+)(?::(\d+))?$/.exec(detail);
    if (m) {
      if (m[1] !== this.nonce) return this.notePeer(m[1]!, Number(m[3] ?? 0));
      const sent = this.pings.get(Number(m[2]));
      if (sent === undefined) return;
      for (const k of this.pings.keys()) if (k <= Number(m[2])) this.pings.delete(k);
      this.freshFrom = Math.max(this.freshFrom, sent);
      return;
    }
    this.flush();
  }

  /**
   * How long a change waits before it is acknowledged: after it, no replica serves what was read
   * before it committed. `auth.token_cache_max_age` may differ between replicas (a rolling deploy,
   * one replica's override), so it is the largest age this replica or any peer announced in a
   * ping within the last PEER_MEMORY_MS. A peer that sent no ping that recently is not fresh, so
   * serves nothing from memory; its next echo comes after this change's notification.
   */
  get settleMs(): number {
    const now = this.now();
    let age = this.enabled ? this.o.maxAgeMs : 0;
    for (const [nonce, p] of this.peers) {
      if (now - p.at > PEER_MEMORY_MS) this.peers.delete(nonce);
      else age = Math.max(age, p.maxAgeMs);
    }
    return age > 0 ? age + 5 : 0;
  }

  /** A peer's ping: its cache age, remembered for PEER_MEMORY_MS (`settleMs`). */
  private notePeer(nonce: string, maxAgeMs: number): void {
    if (!(maxAgeMs > 0)) return;
    if (!this.peers.has(nonce) && this.peers.size >= 1024) this.peers.delete(this.peers.keys().next().value!);
    this.peers.set(nonce, { maxAgeMs, at: this.now() });
  }

  get size(): number {
    return this.entries.size;
  }

  private isFresh(now: number): boolean {
    return this.o.listening() && now < this.freshFrom + this.o.maxAgeMs;
  }

  /** At most one ping per half `maxAge`, and only while requests come and freshness has less than half `maxAge` left. */
  private renew(now: number): void {
    const half = this.o.maxAgeMs / 2;
    if (!this.o.listening() || now - this.freshFrom < half || now - this.pingSentAt < half) return;
    for (const [k, sent] of this.pings) if (now - sent >= this.o.maxAgeMs) this.pings.delete(k);
    const seq = ++this.seq;
    this.pingSentAt = now;
    this.pings.set(seq, now);
    this.reads.ping(`${this.nonce}:${seq}:${Math.round(this.o.maxAgeMs)}`).catch(() => this.pings.delete(seq));
  }

  private load(id: number, now: number): Promise<TokenRow | null> {
    const set = this.loads.get(id) ?? this.loads.set(id, new Set()).get(id)!;
    const l: Load = { startedAt: now, stale: false, row: Promise.resolve(null) };
    set.add(l);
    this.joinable.set(id, l);
    // Kept only if nothing about this account changed (nor the listener) while it was read.
    l.row = this.reads
      .load(id)
      .then((row) => {
        if (row && !l.stale) this.keep(row);
        return row;
      })
      .finally(() => {
        set.delete(l);
        if (!set.size && this.loads.get(id) === set) this.loads.delete(id);
        if (this.joinable.get(id) === l) this.joinable.delete(id);
      });
    return l.row;
  }

  private keep(row: TokenRow): void {
    if (!this.entries.has(row.id) && this.entries.size >= this.o.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(row.id, row);
  }
}

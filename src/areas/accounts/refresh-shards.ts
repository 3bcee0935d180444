import { Membership } from '../../coordination/memberships.js';

/** The membership the accounts area declares (area.ts): the replicas that run `token_refresh` enabled. */
export const REFRESH_MEMBERSHIP = 'token_refresh';

/**
 * Which live replica owns which account's scheduled refresh: rendezvous (highest-random-weight)
 * hashing of the account id over the member list of the area's membership (replicas whose beat is
 * fresh, whose liveness lock is still granted when they publish one, and which run
 * `token_refresh`; the kernel keeps it, coordination/memberships.ts). Every replica computes the
 * same owner from the same list with no coordination; a member joining or leaving moves only the
 * accounts it gains or had (about 1/N), never reshuffles the rest.
 *
 * Ownership is an optimisation, never the safety: the per-account lease still decides who calls
 * the provider. A replica that does not own an account keeps it scheduled as a backstop, later
 * by `auth.refresh_shard_backstop`, so an owner that is alive on paper but not refreshing (wedged,
 * or behind) costs lateness, not a dead token. Until the first beat answers, the member list is
 * unknown and this replica owns everything (as a single replica does).
 */
export class RefreshShards {
  readonly membership: Membership;
  private seeds: Int32Array = new Int32Array(0);
  private seededFor: readonly string[] | null = null;

  /** `self`: this replica's instance id (a membership of its own, fed by `update`), or the kernel's membership. */
  constructor(self: string | Membership) {
    this.membership = typeof self === 'string' ? new Membership(REFRESH_MEMBERSHIP, self) : self;
  }

  get self(): string {
    return this.membership.self;
  }

  /** Resolves once the first member list arrived, or after `ms` (then this replica owns everything until one does). */
  whenKnown(ms: number): Promise<void> {
    return this.membership.whenKnown(ms);
  }

  /** The current member list (sorted), or null before the first beat answered. */
  get members(): readonly string[] | null {
    return this.membership.members;
  }

  onChange(listener: () => void): () => void {
    return this.membership.onChange(listener);
  }

  /** Sets the live member list; returns true (and tells the listeners) when it changed. */
  update(members: readonly string[]): boolean {
    return this.membership.update(members);
  }

  /** The member that owns `accountId`, or null when the list is unknown or empty. */
  owner(accountId: number): string | null {
    const list = this.membership.members;
    if (!list?.length) return null;
    if (this.seededFor !== list) {
      this.seeds = Int32Array.from(list, hashString);
      this.seededFor = list;
    }
    const k = mix(accountId | 0);
    let best = 0;
    let bestScore = -1;
    for (let i = 0; i < list.length; i++) {
      const score = mix(this.seeds[i]! ^ k) >>> 0;
      if (score > bestScore) {
        bestScore = score;
        best = i;
      }
    }
    return list[best]!;
  }

  /** True when this replica owns the account; also true while the list is unknown, and when no member refreshes at all. */
  owns(accountId: number): boolean {
    const o = this.owner(accountId);
    return o === null || o === this.self;
  }
}

/** MurmurHash3's 32-bit finaliser: every input bit affects every output bit. */
function mix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h;
}

/** FNV-1a over the UTF-16 code units, finalised: a stable 32-bit seed per member id. */
function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return mix(h);
}

import { timeout, type Cancel } from '../time/wall.js';

/**
 * Memberships (issue 48): a named group of live replicas that an area declares
 * (`AreaModule.memberships`) and the kernel keeps, knowing nothing of what the group is for.
 *
 * A replica joins a membership while the job the declaration names is enabled on it; its
 * `instances.memberships` says so (migration 040). Every heartbeat's one statement returns, per
 * declared membership, the members alive by the one liveness test (`instanceAliveSql`: a crashed
 * replica drops out at the next beat of any other, not after the heartbeat timeout), and the
 * heartbeat hands each list to its `Membership` here. At shutdown the replica leaves every
 * membership first (a rung of the `rounds` phase), so the others rebalance at their next beat
 * while it drains. Until the first beat answers, a list is unknown (`members` null).
 *
 * What the area does with the list (e.g. the accounts area's rendezvous hashing of accounts over
 * it, areas/accounts/refresh-shards.ts) is the area's.
 */
export class Membership {
  private list: readonly string[] | null = null;
  private readonly listeners = new Set<() => void>();
  private known!: () => void;
  private readonly knownP = new Promise<void>((r) => (this.known = r));

  constructor(
    readonly name: string,
    /** This replica's instance id. */
    readonly self: string,
  ) {}

  /** Resolves once the first member list arrived, or after `ms` (the list then stays unknown until one does). */
  whenKnown(ms: number): Promise<void> {
    if (this.list) return Promise.resolve();
    // Real time on purpose: the first beat's answer is real I/O, whatever clock a test injects.
    let cancel: Cancel | undefined;
    return Promise.race([this.knownP, new Promise<void>((r) => (cancel = timeout(r, ms)))]).finally(() => cancel?.());
  }

  /** The live members (instance ids, sorted), or null before the first beat answered. */
  get members(): readonly string[] | null {
    return this.list;
  }

  /** This replica's position in `members`: -1 when it is not a member, null while the list is unknown. */
  get index(): number | null {
    return this.list ? this.list.indexOf(this.self) : null;
  }

  /** Called on every change of the list, after it changed (synchronously, in subscription order). */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Sets the live member list; returns true (and tells the listeners) when it changed. */
  update(members: readonly string[]): boolean {
    const next = [...new Set(members)].sort();
    if (this.list && next.length === this.list.length && next.every((m, i) => m === this.list![i])) return false;
    this.list = next;
    this.known();
    for (const l of this.listeners) l();
    return true;
  }
}

/** A membership an area declares: its name, and the job whose replicas (those that run it enabled) are its members. */
export interface MembershipSpec {
  name: string;
  job: string;
}

/** The memberships of one runtime: every declared one (its list kept by the heartbeat), and those this replica joins. */
export class Memberships {
  private readonly byName = new Map<string, Membership>();

  constructor(
    readonly self: string,
    declared: readonly string[],
    /** The declared memberships this replica is a member of. */
    readonly joined: readonly string[] = [],
  ) {
    for (const name of declared) this.byName.set(name, new Membership(name, self));
    for (const name of joined) if (!this.byName.has(name)) throw new Error(`membership ${JSON.stringify(name)} is joined but not declared`);
  }

  /** Every declared membership's name. */
  get names(): string[] {
    return [...this.byName.keys()];
  }

  /** The declared membership `name` (an area asks for its own; an undeclared name is a programming error). */
  get(name: string): Membership {
    const m = this.byName.get(name);
    if (!m) throw new Error(`membership ${JSON.stringify(name)} is not declared by any area (AreaModule.memberships)`);
    return m;
  }

  /** A beat's answer: each declared membership's live members (absent: none). Returns the names whose list changed. */
  update(lists: Readonly<Record<string, readonly string[]>>): string[] {
    const changed: string[] = [];
    for (const [name, m] of this.byName) if (m.update(lists[name] ?? [])) changed.push(name);
    return changed;
  }
}

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InstanceRegistry } from '../src/coordination/instance-registry.js';
import { Membership, Memberships } from '../src/coordination/memberships.js';
import { systemClock } from '../src/time/clock.js';
import type { Db } from '../src/store/db.js';
import { BACKENDS } from './helpers/backends.js';

/**
 * Memberships (issue 48): the kernel's generic groups of live replicas. An area declares one; a
 * replica joins it while the job it names is enabled; every beat returns each declared one's live
 * members; leaving at shutdown takes a replica out at the others' next beat. The accounts area's
 * refresh sharding (refresh-shards.test.ts, refresh-shards.e2e.test.ts) is its one user.
 */
const registry = (db: Db, id: string, joined: string[]) =>
  new InstanceRegistry(db, systemClock, { instanceId: id, env: 'test', mode: 'cluster', httpPort: null, version: 't', heartbeatMs: 5000, memberships: ['alpha', 'beta'], joined });

describe.each(BACKENDS)('memberships on $name', (backend) => {
  let db: Db;
  let cleanup: () => Promise<void>;
  beforeAll(async () => ({ db, cleanup } = await backend.open()));
  afterAll(() => cleanup?.());

  it("each beat returns every declared membership's live members; a replica leaves them at shutdown and is gone when stopped", async () => {
    const a = registry(db, 'm-a', ['alpha']);
    const b = registry(db, 'm-b', ['alpha', 'beta']);
    const c = registry(db, 'm-c', []);
    for (const r of [a, b, c]) await r.register();
    // The beat reads the rows as they were before it: a member counts itself in.
    expect((await a.beat(0)).members).toEqual({ alpha: ['m-a', 'm-b'], beta: ['m-b'] });
    expect((await c.beat(0)).members).toEqual({ alpha: ['m-a', 'm-b'], beta: ['m-b'] });
    await b.leaveMemberships();
    expect((await a.beat(0)).members).toEqual({ alpha: ['m-a'], beta: [] });
    await a.markStopped();
    expect((await c.beat(0)).members).toEqual({ alpha: [], beta: [] });
  });

  it('hands each list to its Membership: index, change listeners, unknown until the first beat', async () => {
    const ms = new Memberships('m-x', ['alpha', 'beta'], ['alpha']);
    const alpha = ms.get('alpha');
    expect([alpha.members, alpha.index]).toEqual([null, null]);
    let changes = 0;
    alpha.onChange(() => changes++);
    expect(ms.update({ alpha: ['m-y', 'm-x'] })).toEqual(['alpha', 'beta']);
    expect([alpha.members, alpha.index, ms.get('beta').members, changes]).toEqual([['m-x', 'm-y'], 0, [], 1]);
    expect(ms.update({ alpha: ['m-x', 'm-y'] })).toEqual([]);
    expect(changes).toBe(1);
    ms.update({ alpha: ['m-y'] });
    expect([alpha.index, changes]).toEqual([-1, 2]);
    await new Membership('gamma', 'm-x').whenKnown(0); // an unknown list: resolves after its wait, never hangs
    expect(() => ms.get('gamma')).toThrow(/membership "gamma" is not declared/);
    expect(() => new Memberships('m-x', ['alpha'], ['beta'])).toThrow(/"beta" is joined but not declared/);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { runCli } from './helpers/cli.js';
import { freshDatabase } from './helpers/services.js';
import type { DoctorReport } from '../src/areas/doctor/runner.js';

/**
 * Issue 49, point 4: a replica pointed at another database behind the same Redis, key prefix and
 * environment. The first replica marks the Redis key space with its database; a replica of another
 * database is refused at start naming both, the doctor run against the other database fails
 * `same_backends` naming both, and the documented reset (stop, `DEL` the marker) moves the key
 * space to a new database.
 */
describe('a second database behind the same Redis', () => {
  let cluster: Cluster;
  let other: Awaited<ReturnType<typeof freshDatabase>>;
  let redis: Redis;

  beforeAll(async () => {
    [cluster, other] = await Promise.all([startCluster({ replicas: ['dm0'] }), freshDatabase({ migrated: true })]);
    redis = new Redis(cluster.redis!.url);
  });
  afterAll(async () => {
    redis?.disconnect();
    await cluster?.stop();
    await other?.drop();
  });

  const markerKey = () => `${cluster.prefix}:e2e:database`;
  const marker = async () => JSON.parse((await redis.get(markerKey())) ?? 'null') as { name: string; system_identifier: string | null; set_by: string } | null;
  /** `relay-jobs doctor --json` as an operator runs it (no instance id), on a database of choice. */
  async function sameBackends(databaseUrl: string): Promise<DoctorReport['checks'][number]> {
    const { RELAY_JOBS_INSTANCE_ID: _id, ...env } = cluster.baseEnv('outside', 0);
    const r = await runCli(['doctor', '--json'], { ...env, DATABASE_URL: databaseUrl });
    return (JSON.parse(r.stdout) as DoctorReport).checks.find((c) => c.name === 'same_backends')!;
  }

  it('the first replica marks the key space; one on another database is refused at start naming both, and the doctor fails naming both', async () => {
    const m = await marker();
    expect(m).toMatchObject({ name: cluster.databaseName, set_by: 'dm0' });
    expect(m!.system_identifier).toMatch(/^\d+$/);

    const stray = await cluster.addReplica('dm-stray', { DATABASE_URL: other.url });
    expect(await stray.proc.exitedWithin(120_000)).toBe(2);
    const refusal = stray.lines.filter((l) => l.startsWith('[stderr]')).join('');
    expect(refusal).toContain(`this replica's database ${other.name} (system ${m!.system_identifier})`);
    expect(refusal).toContain(`belongs to: database ${cluster.databaseName} (system ${m!.system_identifier}), marked by replica dm0`);
    expect(refusal).toContain(`redis-cli DEL '${markerKey()}'`);
    // Refused before it registered anywhere or touched the marker.
    expect(await marker()).toMatchObject({ name: cluster.databaseName, set_by: 'dm0' });

    const onOther = await sameBackends(other.url);
    expect(onOther.status).toBe('fail');
    expect(onOther.measured).toContain(`database ${other.name} (system `);
    expect(onOther.measured).toContain(`belongs to: database ${cluster.databaseName} (system `);
    expect(onOther.fix).toContain(`redis-cli DEL '${markerKey()}'`);
    const onOwn = await sameBackends(cluster.databaseUrl!);
    expect(onOwn.status, onOwn.measured).toBe('ok');
    expect(onOwn.measured).toContain("marked as this Redis key space's database");
  });

  it('the database really moved: with the replicas stopped and the marker deleted, the new database takes the key space over', async () => {
    expect(await cluster.replica('dm0').kill('SIGTERM')).toBe(0);
    expect(await redis.del(markerKey())).toBe(1);
    const moved = await cluster.addReplica('dm-moved', { DATABASE_URL: other.url }, true);
    expect(await marker()).toMatchObject({ name: other.name, set_by: 'dm-moved' });
    // Now the old database's replica is the stray one.
    await cluster.replica('dm0').restart(false);
    expect(await cluster.replica('dm0').proc.exitedWithin(120_000)).toBe(2);
    expect(cluster.replica('dm0').lines.join('\n')).toContain(`belongs to: database ${other.name}`);
    expect((await sameBackends(other.url)).status).toBe('ok');
    await moved.kill('SIGTERM');
  });
});

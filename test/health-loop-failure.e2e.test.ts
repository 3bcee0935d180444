/**
 * A loop job's loop failing, on real replicas (issue 49, point 3): the change stream's publisher
 * loop XADDs to a Redis Stream; with that key holding a string, real Redis refuses every XADD
 * (WRONGTYPE). Before any `change_stream` round could notice (they run every 30 s and fail only
 * past `change_stream.lag_bound`), the loop's failures reach the job's health through the failing
 * replica's heartbeat: `failing`, naming the replica, the loop and the error's class, on every
 * replica and in `relay-jobs jobs --json` run outside them. Once the key is fixed the event is
 * published and the job is healthy again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { runCli } from './helpers/cli.js';
import { waitFor } from './helpers/wait.js';
import type { JobView } from '../src/modules/job-views.js';

describe("a loop job's loop failing shows in its health (real replicas and Redis)", () => {
  let cluster: Cluster;
  let redis: Redis;
  let key: string;

  beforeAll(async () => {
    cluster = await startCluster({
      replicas: ['lf0', 'lf1'],
      env: { RELAY_JOBS__AUTH__REFRESH_ENABLED: 'false', RELAY_JOBS__CHANGE_STREAM__POLL_INTERVAL: '200ms' },
    });
    redis = new Redis(cluster.redis!.url);
    key = `${cluster.prefix}:e2e:changes`;
  });
  afterAll(async () => {
    redis?.disconnect();
    await cluster?.stop();
  });

  const view = async (replica: string): Promise<JobView> => ((await (await cluster.api(replica, '/jobs/change_stream')).json()) as { job: JobView }).job;
  const until = async (replica: string, want: (v: JobView) => boolean, what: string): Promise<JobView> => {
    let last: JobView | undefined;
    return waitFor(async () => ((last = await view(replica)) && want(last) ? last : undefined), { what: () => `${what}; last view: ${JSON.stringify(last)}`, timeoutMs: 120_000, intervalMs: 250 });
  };
  // A replica's verdict from its loop (a `change_stream` round failing on XADD may say so too, on that or the other replica: both are true).
  const LOOP = /loop change_stream: \d+ ticks? failed in a row since \S+; last error \w+ WRONGTYPE: WRONGTYPE Operation against a key holding the wrong kind of value/;
  const loopFailing = (v: JobView | undefined) => (v?.health === 'failing' ? (v.instances ?? []).find((i) => i.health === 'failing' && LOOP.test(i.health_reason)) : undefined);

  it('failing with the loop and the error class while Redis refuses the stream, healthy once it accepts it again', async () => {
    // Every replica's first round has run: healthy.
    await until('lf0', (v) => v.health === 'healthy' && v.instances?.length === 2, 'change_stream healthy on both replicas');

    await redis.set(key, 'not a stream');
    // A change to publish: the row a proxy's creation makes its trigger write (migration 035).
    await (await cluster.sql()).query(`INSERT INTO change_events (type, entity, entity_id, fields) VALUES ('proxy.created', 'proxy', '1', '{"name":"loop-health"}')`);

    const failing = await until('lf1', (v) => !!loopFailing(v), "change_stream failing by a replica's loop while XADD is refused");
    const named = loopFailing(failing)!.instance_id;
    expect(failing.worst_instance).toMatch(/^lf[01]$/);
    expect(failing.health_reason).toMatch(new RegExp(`^replica ${failing.worst_instance}: `));
    if (failing.worst_instance === named) expect(failing.health_reason).toMatch(LOOP);
    // The other replica sees the same; so does an operator's `relay-jobs jobs --json`, run outside the replicas.
    await until('lf0', (v) => loopFailing(v)?.instance_id === named, 'lf0 seeing the failing loop too');
    const { RELAY_JOBS_INSTANCE_ID: _id, ...env } = cluster.baseEnv('outside', 0);
    await waitFor(
      async () => {
        const r = await runCli(['jobs', '--json'], env);
        return loopFailing((JSON.parse(r.stdout) as JobView[]).find((j) => j.name === 'change_stream'));
      },
      { what: 'relay-jobs jobs --json showing the failing loop', timeoutMs: 120_000, intervalMs: 500 },
    );

    await redis.del(key);
    // The event reaches the stream, and the job is healthy again. Healthy alone does not say the
    // XADD has happened: a replica that finds the publisher lock taken ends its tick without error
    // while the holder's XADD is still in flight, so both replicas' last ticks can read fine first.
    await waitFor(async () => (await redis.xlen(key)) >= 1, { what: 'the pending event in the stream after the key was fixed', timeoutMs: 120_000, intervalMs: 250 });
    await until('lf0', (v) => v.health === 'healthy' && (v.instances ?? []).every((i) => i.health === 'healthy'), 'change_stream healthy after the key was fixed');
  });
});

import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { ServiceProcess } from './helpers/cli.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { PG_ADMIN_URL } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { instanceAliveSql } from '../src/coordination/instance-registry.js';

/**
 * Sub2API's two backup bugs, with real processes: three replicas share one backup directory.
 * A backup runs on r0; SIGKILLing r1 (and restarting it) does not touch it. SIGKILLing r0 frees
 * its lease by the one lease rule (its liveness session ended with it): another replica marks it
 * failed long before the 30 s lease would expire and removes its partial file; the next backup
 * succeeds. Manual runs asked of two replicas at once make
 * exactly one backup.
 */
const TOKEN = 'backup-e2e-admin-token-0123456789';
const LEASE_MS = 30_000;
const HEARTBEAT_MS = 500;
describe('backup in a cluster of three real replicas', () => {
  let cluster: Cluster;
  let client: pg.Client;
  const dir = mkdtempSync(join(tmpdir(), 'rj-backup-e2e-'));
  const replicas: ServiceProcess[] = [];

  beforeAll(async () => {
    const env = {
      RELAY_JOBS__REDIS__COMMAND_TIMEOUT: undefined, // the default, not the harness's
      RELAY_JOBS__JOBS__SESSION_CLEANUP__ENABLED: undefined,
      RELAY_JOBS__DATABASE__POOL_SIZE: '4',
      RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: `${HEARTBEAT_MS}ms`,
      RELAY_JOBS__BACKUP__DIR: dir,
      RELAY_JOBS__BACKUP__LEASE: `${LEASE_MS}ms`,
      // Scheduled once a year: the rounds of this test are asked for by hand.
      RELAY_JOBS__JOBS__BACKUP__CRON: '0 0 1 1 *',
      RELAY_JOBS__JOBS__TOKEN_REFRESH__ENABLED: 'false',
    };
    cluster = await startCluster({ replicas: 3, migrate: false, waitStarted: false, adminToken: TOKEN, env });
    client = await cluster.sql();
    replicas.push(...cluster.replicas.map((r) => r.proc));
    await Promise.all(replicas.map((r) => r.waitForLine(/relay-jobs started/, 60_000)));
    // Enough rows that a backup (dump, upload, restore into a scratch database) takes a few seconds.
    await client.query(`INSERT INTO billing_users (external_id, email) SELECT md5(g::text) || md5((g * 3)::text), md5(g::text) || '@example.com' FROM generate_series(1, 200000) g`);
  }, 120_000);
  afterAll(() => cluster?.stop());

  const api = async (i: number, method: string, path: string) => {
    const res = await fetch(cluster.replica(i).url(`/api/v1${path}`), {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(method === 'POST' ? { 'content-type': 'application/json' } : {}) },
      body: method === 'POST' ? '{}' : undefined,
    });
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  };
  const record = async (id: string) => (await client.query(`SELECT *, lease_until > clock_timestamp() AS leased, clock_timestamp() AS now FROM backups WHERE id = $1`, [id])).rows[0];
  const filesOf = (id: string) =>
    readdirSync(dir, { recursive: true })
      .map(String)
      .filter((f) => f.includes(id));
  const scratchDbs = async (id: string) => {
    const c = new pg.Client({ connectionString: PG_ADMIN_URL });
    await c.connect();
    const { rows } = await c.query(`SELECT datname FROM pg_database WHERE datname = $1`, [`rj_verify_${id}`]);
    await c.end();
    return rows.length;
  };

  it(
    "a killed bystander does not touch a running backup; a killed owner's backup fails as soon as its liveness is gone, before its lease expires, cleaned up; exactly one backup per request",
    { timeout: 240_000 },
    async () => {
      // 1. r0 backs up; r1 is SIGKILLed and restarted meanwhile; r2's request is refused naming r0's backup.
      const first = await api(0, 'POST', '/backups');
      expect(first.status).toBe(202);
      const id1 = first.body.id as string;
      replicas[1]!.proc.kill('SIGKILL');
      const busy = await api(2, 'POST', '/backups');
      expect(busy.status).toBe(409);
      expect(busy.body.error.running_id).toBe(id1);
      await replicas[1]!.exited;
      // r1's old registration must be dead (its liveness session ended, or its beat stale) before its id can register again.
      await waitFor(async () => (await client.query(`SELECT ${instanceAliveSql('i', '$1')} AS alive FROM instances i WHERE instance_id = 'r1'`, [HEARTBEAT_MS * 3])).rows[0]?.alive === false, {
        what: "r1's killed registration to stop counting as alive",
      });
      await cluster.replica(1).restart(false);
      replicas[1] = cluster.replica(1).proc;
      await replicas[1].waitForLine(/relay-jobs started/, 60_000);
      const done1 = await waitFor(
        async () => {
          const r = await record(id1);
          return r.state !== 'running' && r;
        },
        { what: 'backup 1 to finish' },
      );
      expect(done1.error).toBeNull();
      expect(done1.state).toBe('verified');
      expect(done1.instance_id).toBe('r0');

      // 2. r0 starts another and is SIGKILLed mid-backup.
      const second = await api(0, 'POST', '/backups');
      expect(second.status).toBe(202);
      const id2 = second.body.id as string;
      await waitFor(async () => filesOf(id2).length > 0 || (await scratchDbs(id2)) > 0, { what: 'backup 2 to be writing' });
      replicas[0]!.proc.kill('SIGKILL');
      await replicas[0]!.exited;
      const atKill = await record(id2);
      expect(atKill.state).toBe('running');
      expect(atKill.leased).toBe(true); // nobody may touch it yet
      const leaseAtKill = new Date(atKill.lease_until).getTime();
      const failed = await waitFor(
        async () => {
          const r = await record(id2);
          return r.state !== 'running' && r;
        },
        { what: 'backup 2 to be reaped' },
      );
      expect(failed.state).toBe('failed');
      expect(failed.error).toMatch(/abandoned: instance r0 stopped renewing its lease/);
      expect(failed.error).toMatch(/its process ended: its liveness session is gone/);
      expect(new Date(failed.finished_at).getTime()).toBeLessThan(leaseAtKill);
      // The reaper marks the record first (that statement is the claim), then removes what it left.
      await waitFor(async () => filesOf(id2).length === 0 && (await scratchDbs(id2)) === 0, { what: 'the partial file and scratch database to be removed', timeoutMs: 20_000 });

      // 3. The next backup, asked of both survivors at once through the job: exactly one runs, and it succeeds.
      const [a, b] = await Promise.all([api(1, 'POST', '/jobs/backup/run'), api(2, 'POST', '/jobs/backup/run')]);
      expect([a.status, b.status].sort()).toEqual([202, 409]);
      const next = await waitFor(
        async () => {
          const { rows } = await client.query(`SELECT * FROM backups WHERE id NOT IN ($1, $2) AND state <> 'running'`, [id1, id2]);
          return rows[0];
        },
        { what: 'the next backup to finish' },
      );
      expect(next.state).toBe('verified');
      const { rows: all } = await client.query(`SELECT id FROM backups ORDER BY started_at`);
      expect(all.map((r) => r.id)).toEqual([id1, id2, next.id]);
      // One round ran (the other replica's request was refused before claiming), and it ended ok.
      const runs = await waitFor(
        async () => {
          const { rows } = await client.query(`SELECT status FROM job_runs WHERE job_name = 'backup' AND status <> 'skipped_not_leader'`);
          return rows.every((r) => r.status !== 'running') && rows;
        },
        { what: 'the round to be recorded' },
      );
      expect(runs.map((r) => r.status)).toEqual(['ok']);
    },
  );
});

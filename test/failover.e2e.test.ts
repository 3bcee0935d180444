import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { ServiceProcess } from './helpers/cli.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { waitFor } from './helpers/wait.js';

/**
 * Crash failover with real processes (docs/coordination.md, "Crash detection"): three replicas
 * run a 1 s canary sleeping 300 ms under a 3 s lease.
 * - SIGKILL of the replica mid-round: its liveness session dies with it, so the very next slot
 *   runs on another replica (failover within one interval, no slot missed), not after the lease.
 * - SIGSTOP of the replica mid-round for longer than the lease: its session is alive, so nobody
 *   takes over before the lease expires; after that another replica does, and when the paused
 *   process resumes, its round's fenced write is refused by the database.
 * At the end: no slot ran twice, and no two rounds overlapped except the paused one, which the
 * fencing token cut off.
 */
const INTERVAL = 1000;
const LOCK_TTL = 3000;

describe('crash failover of real replicas', () => {
  let cluster: Cluster;
  let client: pg.Client;
  const replicas: ServiceProcess[] = [];

  beforeAll(async () => {
    cluster = await startCluster({
      replicas: ['f0', 'f1', 'f2'],
      waitStarted: false,
      env: {
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__SHUTDOWN__GRACE: '5s',
        RELAY_JOBS__JOBS__CANARY__ENABLED: 'true',
        RELAY_JOBS__JOBS__CANARY__EVERY: `${INTERVAL}ms`,
        RELAY_JOBS__JOBS__CANARY__SLEEP: '300ms',
        RELAY_JOBS__JOBS__CANARY__TIMEOUT: '2s',
        RELAY_JOBS__JOBS__CANARY__LOCK_TTL: `${LOCK_TTL}ms`,
      },
    });
    // A paused replica is resumed before the harness kills it.
    cluster.onStop(async () => {
      for (const r of cluster.alive) r.proc.proc.kill('SIGCONT');
    });
    replicas.push(...cluster.replicas.map((r) => r.proc));
    client = await cluster.sql();
  });
  afterAll(() => cluster?.stop());

  const dbNow = async () => Number((await client.query(`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS t`)).rows[0].t);
  /** A replica in the middle of a round: started 50-200 ms ago, so its 300 ms sleep has not ended. */
  const midRound = () =>
    waitFor(
      async () => {
        const { rows } = await client.query(
          `SELECT instance_id, fencing_token::int AS token, extract(epoch FROM started_at) * 1000 AS started FROM job_runs
          WHERE job_name = 'canary' AND status = 'running' AND started_at BETWEEN clock_timestamp() - interval '200 milliseconds' AND clock_timestamp() - interval '50 milliseconds'`,
        );
        const r = rows[0] && replicas.find((p) => p.name === rows[0].instance_id && p.proc.exitCode === null);
        return r ? { replica: r, token: rows[0].token as number, started: Number(rows[0].started) } : null;
      },
      { what: 'a replica mid-round', intervalMs: 20 },
    );
  const roundsAfter = async (t: number) =>
    (
      await client.query(
        `SELECT r.instance_id AS instance, r.fencing_token::int AS token, extract(epoch FROM r.slot) * 1000 AS slot, extract(epoch FROM s.at) * 1000 AS start
           FROM job_runs r JOIN canary_runs s ON s.fencing_token = r.fencing_token AND s.phase = 'start'
          WHERE r.job_name = 'canary' AND s.at > to_timestamp($1 / 1000.0) ORDER BY s.at`,
        [t],
      )
    ).rows.map((r) => ({ instance: r.instance as string, token: r.token as number, slot: Number(r.slot), start: Number(r.start) }));

  /** Canary rounds that wrote their end row after `t` (DB clock, ms). */
  const endedAfter = async (t: number) => Number((await client.query(`SELECT count(*)::int AS n FROM canary_runs WHERE phase = 'end' AND at > to_timestamp($1 / 1000.0)`, [t])).rows[0].n);

  it('SIGKILL: the next slot runs elsewhere; SIGSTOP past the lease: taken over at expiry, the stale round fenced', async () => {
    await Promise.all(replicas.map((r) => r.waitForLine(/relay-jobs started/)));
    await Promise.all(replicas.map((r) => r.waitForLine(/liveness session open/)));
    // Rounds are running: two have ended.
    await waitFor(async () => (await endedAfter(0)) >= 2, { what: 'two canary rounds', intervalMs: 20 });

    // ---- SIGKILL mid-round ----
    const killed = await midRound();
    killed.replica.proc.kill('SIGKILL');
    await killed.replica.exited;
    const killedAt = await dbNow();
    const afterKill = await waitFor(async () => (await roundsAfter(killedAt)).find((r) => r.instance !== killed.replica.name), { what: 'a round after the kill', intervalMs: 20 });
    // Failover within one interval: the first slot after the kill is the one that ran (no slot
    // missed), on a survivor, before the dead round's lease (3 s) could have expired.
    expect(afterKill.slot, 'the slot right after the kill ran').toBeLessThanOrEqual(killedAt + INTERVAL);
    expect(afterKill.token).toBeGreaterThan(killed.token);
    console.log(`SIGKILL failover: next round started ${Math.round(afterKill.start - killedAt)} ms after the kill (slot ${new Date(afterKill.slot).toISOString()})`);
    const abandoned = await client.query(`SELECT error FROM job_runs WHERE fencing_token = $1 AND job_name = 'canary'`, [killed.token]);
    expect(abandoned.rows[0].error).toMatch(/^abandoned: its instance died/);
    // Steady again on the survivors: the failover round and the next have ended.
    await waitFor(async () => (await endedAfter(afterKill.start)) >= 2, { what: 'a round after the failover', intervalMs: 20 });

    // ---- SIGSTOP mid-round, past the lease ----
    const paused = await midRound();
    paused.replica.proc.kill('SIGSTOP');
    const stoppedAt = await dbNow();
    const takeover = await waitFor(async () => (await roundsAfter(stoppedAt)).find((r) => r.instance !== paused.replica.name), {
      what: 'the take-over of the paused round',
      timeoutMs: LOCK_TTL * 10, // the lease's expiry and the next slot, 3-4 s on a quiet machine
      intervalMs: 20,
    });
    // A paused process's session is alive: the detector must not fire, only the lease's expiry frees the job.
    expect(takeover.start - paused.started, 'taken over no earlier than the lease').toBeGreaterThanOrEqual(LOCK_TTL - 50);
    // The paused process resumes only after the round that took over has finished its fenced write.
    await waitFor(async () => (await client.query(`SELECT 1 FROM canary_runs WHERE fencing_token = $1 AND phase = 'end'`, [takeover.token])).rows[0], {
      what: 'the take-over round to end',
      intervalMs: 20,
    });
    paused.replica.proc.kill('SIGCONT');
    await waitFor(async () => paused.replica.lines.find((l: string) => /fenced write refused|lease lost|taken over as abandoned/.test(l)), {
      what: 'the paused round to notice',
      timeoutMs: 10_000,
      intervalMs: 20,
    });
    // Rounds go on after the resumed process noticed: three more have ended, and more than the eight
    // rounds the evidence below needs in all (a loaded machine skips slots, so the count is waited for).
    const noticedAt = await dbNow();
    await waitFor(async () => (await endedAfter(noticedAt)) >= 3 && (await endedAfter(0)) >= 9, { what: 'three rounds after the resume, nine in all', intervalMs: 20 });

    const survivors = replicas.filter((r) => r !== killed.replica);
    for (const r of survivors) r.proc.kill('SIGTERM');
    expect(await Promise.all(survivors.map((r) => r.exited))).toEqual([0, 0]);

    // ---- the evidence ----
    // The paused round never got past its fenced write: no `end` row, the cursor holds a newer token.
    const pausedEnd = await client.query(`SELECT 1 FROM canary_runs WHERE fencing_token = $1 AND phase = 'end'`, [paused.token]);
    expect(pausedEnd.rows, 'the paused round finished after being taken over').toEqual([]);
    const cursor = await client.query(`SELECT fencing_token::int AS token FROM job_cursors WHERE job_name = 'canary' AND key = 'last_slot'`);
    expect(cursor.rows[0].token).toBeGreaterThan(paused.token);
    const pausedRec = await client.query(`SELECT status, error FROM job_runs WHERE fencing_token = $1 AND job_name = 'canary'`, [paused.token]);
    expect(pausedRec.rows[0]).toMatchObject({ status: 'failed', error: expect.stringMatching(/^abandoned/) });

    const dup = await client.query(`SELECT slot FROM job_runs WHERE job_name = 'canary' AND fencing_token IS NOT NULL AND trigger = 'schedule' GROUP BY slot HAVING count(*) > 1`);
    expect(dup.rows, 'a slot ran twice').toEqual([]);
    const dupStart = await client.query(`SELECT slot FROM canary_runs WHERE phase = 'start' GROUP BY slot HAVING count(*) > 1`);
    expect(dupStart.rows, 'a canary slot started twice').toEqual([]);
    const { rows } = await client.query(
      `
      SELECT s.fencing_token::int AS token, extract(epoch FROM s.at) * 1000 AS start, extract(epoch FROM e.at) * 1000 AS "end", r.instance_id AS instance
        FROM canary_runs s JOIN job_runs r ON r.fencing_token = s.fencing_token AND r.job_name = 'canary'
        LEFT JOIN canary_runs e ON e.fencing_token = s.fencing_token AND e.phase = 'end'
       WHERE s.phase = 'start' AND s.fencing_token <> $1 ORDER BY s.at`,
      [paused.token],
    );
    expect(rows.length).toBeGreaterThan(8);
    for (let i = 1; i < rows.length; i++) {
      const prev = rows[i - 1]!;
      const end = prev.end !== null ? Number(prev.end) : prev.token === killed.token ? killedAt : null;
      expect(end, `round ${prev.token} has an end`).not.toBeNull();
      expect(Number(rows[i]!.start), `round ${rows[i]!.token} overlapped round ${prev.token}`).toBeGreaterThanOrEqual(end!);
    }
  }, 120_000);
});

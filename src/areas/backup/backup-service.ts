import { randomBytes } from 'node:crypto';
import { basename } from 'node:path';
import type { Backups, BackupRecord, BackupTrigger } from './store/backups.js';
import { checksumKey, type BackupStorage } from './backup-storage.js';
import { LeaseKeeper } from '../../coordination/lease-keeper.js';
import type { BackupMetrics } from './metrics.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Clock } from '../../time/clock.js';
import type { Dumper } from './dumper.js';
import type { Verifier } from './verifier.js';
import { oneLine } from './hash-counter.js';
import { pickPrunable } from './retention.js';
import type { Deadline } from '../../time/deadline.js';
import { Conflict } from '../../errors/app-error.js';
import { ServiceLoop, type LoopTickCounter } from '../../workers/service-loop.js';
import type { WakeHub } from '../../workers/wake-hub.js';

/** A backup was asked for while another one runs somewhere in the cluster (a conflict naming it). */
export class BackupBusy extends Conflict {
  constructor(
    readonly runningId: string,
    readonly instanceId: string,
  ) {
    super('busy', `backup ${runningId} is already running on ${instanceId}`, { running_id: runningId, instance_id: instanceId });
  }
}

export interface BackupServiceOptions {
  backups: Backups;
  storage: BackupStorage;
  dumper: Dumper;
  verifier: Verifier | null;
  clock: Clock;
  log: Logger;
  metrics: BackupMetrics;
  instanceId: string;
  /** This replica's liveness key now (null in embedded mode or while its session reopens): a backup records it, so its death frees the lease at once. */
  aliveKey?: () => number | null;
  env: string;
  /** The database's name in object keys: `<env>/<db>/<YYYYMMDD-HHMMSS>-<id>.dump.gz`. */
  dbName: string;
  compression: string;
  leaseMs: number;
  keepLast: number;
  keepDays?: number;
  newId?: () => string;
  ticks?: LoopTickCounter;
  /** Wake-ups: a backup starting anywhere wakes the reaper (migration 028), which then sleeps until its lease could expire. */
  wakes?: WakeHub;
}

/** The reaper's backstop while notifications arrive (a belt: a start wakes it, a running lease sets its next look). */
const REAPER_IDLE_MS = 10 * 60_000;

function stamp(ms: number): string {
  const d = new Date(ms).toISOString();
  return `${d.slice(0, 4)}${d.slice(5, 7)}${d.slice(8, 10)}-${d.slice(11, 13)}${d.slice(14, 16)}${d.slice(17, 19)}`;
}

/**
 * Runs backups: one at a time cluster-wide (the `backups_one_running` index), each owned by the
 * instance writing it through a lease renewed every third of `leaseMs`. Any replica may reap a
 * record whose lease is free by the one lease rule (store/liveness-sql.ts: expired on the database
 * clock, or its writer's liveness key held by no session: a killed writer's backup is reaped within
 * `LIVENESS_LOOK_MS`, not a lease period later), marking it failed and removing its partial
 * objects; nothing else ever touches another instance's running backup, so a replica that
 * restarts cannot fail a backup a live replica is still writing (Sub2API's bug).
 * The reaper is a `ServiceLoop` (`backup_reaper`): a reap at start, then as the earliest running
 * lease could expire, or every `LIVENESS_LOOK_MS` while a running backup's writer has a liveness
 * key. With wake-ups listening it is woken by a backup starting on any replica
 * (migration 028) and otherwise sleeps (issue 26: no read every lease period while nothing
 * runs); without them it looks every `leaseMs`, as before.
 */
export class BackupService {
  private readonly inFlight = new Map<string, { abort: AbortController; done: Promise<BackupRecord> }>();
  private readonly reaper: ServiceLoop;

  constructor(private readonly o: BackupServiceOptions) {
    this.reaper = new ServiceLoop({
      name: 'backup_reaper',
      clock: o.clock,
      log: o.log,
      ticks: o.ticks,
      backstopMs: () => (o.wakes?.listening ? Math.max(REAPER_IDLE_MS, o.leaseMs) : o.leaseMs),
      tick: () => this.reapTick(),
    });
  }

  keyFor(id: string, at: number): string {
    return `${this.o.env}/${this.o.dbName}/${stamp(at)}-${id}.dump.gz`;
  }

  /**
   * Claims the one running slot and starts the backup; `done` settles with its final record.
   * Throws BackupBusy (with the running id) when another backup holds the slot.
   */
  async start(trigger: BackupTrigger, opts: { jobRunId?: number | null; signal?: AbortSignal } = {}): Promise<{ id: string; done: Promise<BackupRecord> }> {
    await this.reap();
    // Fail before claiming the slot when the tools or the storage cannot work (one-line UserError).
    await this.o.dumper.check();
    await this.o.storage.check();
    const id = this.o.newId?.() ?? randomBytes(6).toString('hex');
    const key = this.keyFor(id, this.o.clock.now());
    const started = await this.o.backups.start({
      id,
      trigger,
      instanceId: this.o.instanceId,
      leaseMs: this.o.leaseMs,
      storage: this.o.storage.kind,
      location: this.o.storage.location(key),
      objectKey: key,
      format: this.o.dumper.format,
      compression: this.o.compression,
      jobRunId: opts.jobRunId ?? null,
      aliveKey: this.o.aliveKey?.() ?? null,
    });
    if (!started) {
      const running = await this.o.backups.running();
      throw new BackupBusy(running?.id ?? 'unknown', running?.instance_id ?? 'unknown');
    }
    const abort = new AbortController();
    if (opts.signal) opts.signal.addEventListener('abort', () => abort.abort(opts.signal!.reason), { once: true });
    const done = this.execute(id, trigger, key, abort).finally(() => this.inFlight.delete(id));
    this.inFlight.set(id, { abort, done });
    return { id, done };
  }

  /** A backup started somewhere (a wake-up): look now, then sleep until its lease could expire. */
  wakeReaper(reason = 'wake'): void {
    this.reaper.wake(reason);
  }

  private async reapTick(): Promise<{ items: number; nextDueAt: number | null }> {
    const { reaped, nextExpiryMs } = await this.o.backups.reapAndNext();
    await this.removeReaped(reaped);
    // A little after the expiry, so the database clock agrees it has passed.
    return { items: reaped.length, nextDueAt: nextExpiryMs === null ? null : this.o.clock.now() + nextExpiryMs + 250 };
  }

  /** Marks failed every running backup whose lease expired and removes what it left in storage. */
  async reap(): Promise<number> {
    const reaped = await this.o.backups.reapExpired();
    await this.removeReaped(reaped);
    return reaped.length;
  }

  private async removeReaped(reaped: BackupRecord[]): Promise<void> {
    for (const r of reaped) {
      this.o.metrics.abandoned.inc();
      this.o.log.warn({ backup: r.id, owner: r.instance_id }, 'backup abandoned: its writer stopped renewing its lease or its process ended; partial objects removed');
      await this.o.storage.remove(r.object_key).catch((err) => this.o.log.warn({ backup: r.id, err: oneLine(err) }, "could not remove an abandoned backup's objects"));
      await this.o.verifier?.dropScratch(r.id).catch((err) => this.o.log.warn({ backup: r.id, err: oneLine(err) }, "could not drop an abandoned backup's scratch database"));
    }
  }

  /** Reaps abandoned backups (any replica may; only free leases are touched: expired, or their writer's liveness gone). */
  startReaper(): void {
    this.reaper.start();
  }

  /** Stops the reaper and aborts this instance's backups, waiting until `by` for them to record their end; returns those still running. */
  async stop(by: Deadline): Promise<number> {
    const running = [...this.inFlight.values()];
    for (const r of running) r.abort.abort(new Error('instance shutting down'));
    const settled = Promise.allSettled(running.map((r) => r.done)).then(() => 0);
    const [reaping, done] = await Promise.all([this.reaper.stop(by), by.settled(settled)]);
    return reaping + (done ? 0 : this.inFlight.size);
  }

  private async execute(id: string, trigger: BackupTrigger, key: string, abort: AbortController): Promise<BackupRecord> {
    const { backups, storage, log, metrics } = this.o;
    const startedAt = this.o.clock.now();
    const keeper = new LeaseKeeper({
      clock: this.o.clock,
      leaseMs: this.o.leaseMs,
      renewLease: () => backups.renew(id, this.o.instanceId, this.o.leaseMs, this.o.aliveKey?.() ?? null),
      onLost: (reason) => abort.abort(new Error(`backup lease lost: ${reason}`)),
    });
    keeper.start(startedAt);
    log.info({ backup: id, trigger, location: storage.location(key) }, 'backup started');
    try {
      const dump = await this.o.dumper.dump((body) => storage.put(key, body, abort.signal), abort.signal);
      await storage.putText(checksumKey(key), `${dump.sha256}  ${basename(key)}\n`);
      let state: 'completed' | 'verified' | 'verify_failed' = 'completed';
      let verifyError: string | null = null;
      if (this.o.verifier && dump.counts) {
        verifyError = await this.o.verifier.verify({ id, key, sha256: dump.sha256, counts: dump.counts }, abort.signal);
        state = verifyError ? 'verify_failed' : 'verified';
      }
      if (abort.signal.aborted) throw abort.signal.reason;
      const mine = await backups.finish(id, this.o.instanceId, { state, sizeBytes: dump.sizeBytes, sha256: dump.sha256, serverVersion: dump.serverVersion, tableCounts: dump.counts, verifyError });
      if (!mine) log.warn({ backup: id }, 'backup finished after its lease had expired and it was reaped; its record stays failed');
      metrics.finished.inc({ trigger, state });
      metrics.duration.observe({ trigger }, (this.o.clock.now() - startedAt) / 1000);
      if (state !== 'verify_failed') {
        metrics.goodAt(trigger, this.o.clock.now());
        metrics.size.set({ trigger }, dump.sizeBytes);
      }
      log[state === 'verify_failed' ? 'error' : 'info']({ backup: id, state, bytes: dump.sizeBytes, sha256: dump.sha256, verify_error: verifyError }, `backup ${state}`);
      // After a verify_failed one too (its dump is kept): retention never deletes the newest good backup,
      // and a role that cannot verify (no CREATEDB) would otherwise keep every dump for ever.
      if (mine) await this.prune().catch((err) => log.warn({ err: oneLine(err) }, 'backup retention failed; the next backup retries'));
    } catch (err) {
      const error = abort.signal.aborted ? oneLine(abort.signal.reason) : oneLine(err);
      log.error({ backup: id, err: error }, 'backup failed');
      await storage.remove(key).catch(() => undefined);
      await backups.finish(id, this.o.instanceId, { state: 'failed', error }).catch(() => undefined);
      metrics.finished.inc({ trigger, state: 'failed' });
    } finally {
      keeper.stop();
    }
    return (await backups.get(id))!;
  }

  /** Retention: deletes objects, then records, of backups past keep_last/keep_days; never the newest verified one. */
  async prune(): Promise<number> {
    const victims = pickPrunable(await this.o.backups.finished(), { keepLast: this.o.keepLast, keepDays: this.o.keepDays, now: this.o.clock.now() });
    for (const b of victims) {
      await this.o.storage.remove(b.object_key);
      await this.o.backups.delete(b.id);
      this.o.metrics.pruned.inc();
    }
    if (victims.length) this.o.log.info({ pruned: victims.map((b) => b.id) }, 'old backups deleted');
    return victims.length;
  }

  list(limit?: number): Promise<BackupRecord[]> {
    return this.o.backups.list(limit);
  }

  get(id: string): Promise<BackupRecord | null> {
    return this.o.backups.get(id);
  }

  /** Seeds the last-success gauge from the table (another replica may have made the newest backup). */
  /** When the newest good backup (verified, or completed when verification is off) finished, of any trigger. */
  async lastGoodAt(): Promise<Date | null> {
    const good = await this.o.backups.lastGood();
    return good.reduce<Date | null>((max, g) => (!max || g.at > max ? g.at : max), null);
  }

  async loadMetrics(): Promise<void> {
    for (const g of await this.o.backups.lastGood()) this.o.metrics.goodAt(g.trigger, g.at.getTime());
  }
}

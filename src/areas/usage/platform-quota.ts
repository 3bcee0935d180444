import { AppError, InvalidInput } from '../../errors/app-error.js';
import { parseMember, quotaMember, type QuotaCounters } from '../../coordination/quota-counters.js';
import type { QuotaRow, QuotaUsage } from './store/quota-usage.js';
import type { DeadLetters } from '../../store/dead-letters.js';
import { isDataError, isStorableText, writeIsolatingPoison } from '../../store/poison-split.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import { UsageMetrics } from './metrics.js';
import { parseBody } from '../../http/validation.js';
import { quotaIncrement } from './usage-contracts.js';

/** The counters (Redis) did not answer: retryable. The increment may or may not have been applied (see docs/usage.md). */
export class QuotaUnavailable extends AppError {
  override readonly retryAfterSeconds = 1;
  constructor(cause: Error) {
    super('unavailable', 'quota_unavailable', `quota counters unavailable (${cause.message.split('\n')[0]}); retry later: the increment may already have been applied`);
  }
}

export interface FlushResult {
  dirty: number;
  flushed: number;
  stale: number;
  reAdded: number;
}

/**
 * Per-user platform usage: the hot path adds to a counter (Redis, or memory in embedded mode)
 * and marks it dirty; the flusher pops dirty counters in batches and writes their absolute
 * values to PostgreSQL in one upsert per batch. A counter is seeded from PostgreSQL the first
 * time it is seen, so a Redis that lost its data does not count from zero; a reset bumps the
 * counter's epoch, which makes every older snapshot lose in the upsert. A counter PostgreSQL
 * refuses for its content (a user id with a NUL) is dead-lettered and dropped from the dirty set,
 * so it can never fail every later flush; the other counters of its batch are written.
 */
export class PlatformQuota {
  /** Told after an increment or reset marked a counter dirty (the flush loop sets its flush). */
  onDirty: (() => void) | null = null;

  private readonly um: UsageMetrics;

  constructor(
    private readonly counters: QuotaCounters,
    readonly store: QuotaUsage,
    private readonly batch: number,
    private readonly metrics: Metrics,
    private readonly log: Logger,
    private readonly deadLetters: DeadLetters,
  ) {
    this.um = metrics.group(UsageMetrics);
  }

  async increment(userId: string, platform: string, amount: number): Promise<{ used: number }> {
    // Checked before the counter moves: a counter PostgreSQL cannot store would be counted and never flushed.
    // The HTTP body's bounds hold for a library caller too: NaN, 1.5, -100 or "5" would make the count
    // null or text, and the flush would set it aside (the user's usage lost at the next restart).
    parseBody(quotaIncrement, { user_id: userId, platform, amount });
    const bad = [
      ['user_id', userId],
      ['platform', platform],
    ].filter(([, v]) => !isStorableText(v!));
    if (bad.length) throw new InvalidInput(bad.map(([field]) => ({ field: field!, message: 'text contains a NUL character or an unpaired UTF-16 surrogate, which cannot be stored' })));
    const member = quotaMember(userId, platform);
    try {
      const r = await this.counters.increment(member, amount);
      this.onDirty?.();
      if (r.seeded) return { used: r.used };
      const stored = await this.store.get(userId, platform);
      await this.counters.seed(member, stored?.used ?? 0, stored?.epoch ?? 0);
      // A first increment records the (user, platform) pair at once, so reads list it before the
      // first flush; the upsert only moves forward, so this zero can never roll a count back.
      if (!stored) await this.store.upsert([{ user_id: userId, platform, used: 0, epoch: 0 }]);
      const [now] = await this.counters.read([member]);
      return { used: now?.used ?? r.used };
    } catch (err) {
      // Redis (or PostgreSQL, for the first seed) did not answer: a retryable 503, never a 500.
      if (isDataError(err)) throw err;
      throw new QuotaUnavailable(err as Error);
    }
  }

  /**
   * A user's usage per platform, read through the counters: an increment answered a moment ago
   * shows here even before the flusher has written it to PostgreSQL.
   */
  async current(userId: string): Promise<Array<{ user_id: string; platform: string; used: number; epoch: number; updated_at: string; flushed: boolean }>> {
    const rows = await this.store.list(userId);
    const live = await this.counters.read(rows.map((r) => quotaMember(r.user_id, r.platform)));
    return rows.map((row, i) => {
      const c = live[i];
      const ahead = c && c.seeded && (c.epoch > row.epoch || (c.epoch === row.epoch && c.used !== row.used));
      return ahead ? { ...row, used: c.used, epoch: c.epoch, flushed: false } : { ...row, flushed: true };
    });
  }

  /** Admin reset to zero; visible in PostgreSQL at once. Returns the new epoch. */
  async reset(userId: string, platform: string): Promise<number> {
    const stored = await this.store.get(userId, platform);
    const epoch = await this.counters.reset(quotaMember(userId, platform), stored?.epoch ?? 0);
    this.onDirty?.();
    await this.store.upsert([{ user_id: userId, platform, used: 0, epoch }]);
    this.log.info({ user_id: userId, platform, epoch }, 'platform quota reset');
    return epoch;
  }

  /** One batch: pop, read, upsert. On any error the popped keys go back into the dirty set. */
  async flushOnce(): Promise<FlushResult> {
    const members = await this.counters.popDirty(this.batch);
    const result: FlushResult = { dirty: members.length, flushed: 0, stale: 0, reAdded: 0 };
    if (!members.length) return result;
    this.um.quotaFlush.inc({ outcome: 'dirty' }, members.length);
    try {
      const values = await this.counters.read(members);
      const unseeded: string[] = [];
      const poison: Array<{ row: QuotaRow; reason: string }> = [];
      for (const m of values.filter((v) => v && !v.seeded).map((v) => v!.member)) {
        const { userId, platform } = parseMember(m);
        try {
          const stored = await this.store.get(userId, platform);
          await this.counters.seed(m, stored?.used ?? 0, stored?.epoch ?? 0);
          unseeded.push(m);
        } catch (err) {
          if (!isDataError(err)) throw err;
          poison.push({ row: { user_id: userId, platform, used: 0, epoch: 0 }, reason: `${(err as { code: string }).code}: ${(err as Error).message}` });
        }
      }
      const rows = values.filter((v) => v && v.seeded).map((v) => ({ ...parseMember(v!.member), used: v!.used, epoch: v!.epoch }));
      const r = await writeIsolatingPoison(
        rows.map((x) => ({ user_id: x.userId, platform: x.platform, used: x.used, epoch: x.epoch })),
        (part) => this.store.upsert(part),
      );
      poison.push(...r.poisoned);
      if (poison.length) await this.setAside(poison);
      result.flushed = r.written;
      result.stale = rows.length - r.poisoned.length - r.written;
      if (unseeded.length) result.reAdded += await this.readd(unseeded);
      this.um.quotaFlush.inc({ outcome: 'flushed' }, r.written);
      this.um.quotaFlush.inc({ outcome: 'stale' }, result.stale);
      return result;
    } catch (err) {
      this.um.quotaFlush.inc({ outcome: 'errors' });
      result.reAdded += await this.readd(members);
      throw err;
    }
  }

  /** Flushes until no dirty counter is left (or `maxBatches`); the final flush at shutdown. */
  async flushAll(maxBatches = 10_000): Promise<FlushResult> {
    const total: FlushResult = { dirty: 0, flushed: 0, stale: 0, reAdded: 0 };
    for (let i = 0; i < maxBatches; i++) {
      const r = await this.flushOnce();
      total.dirty += r.dirty;
      total.flushed += r.flushed;
      total.stale += r.stale;
      total.reAdded += r.reAdded;
      if (r.dirty === 0 || r.dirty === r.reAdded) break;
    }
    return total;
  }

  /** Counters PostgreSQL refuses for their content: kept in dead_letters with their last value, never flushed again. */
  private async setAside(poison: Array<{ row: QuotaRow; reason: string }>): Promise<void> {
    await this.deadLetters.add(poison.map((p) => ({ source: 'quota_flush', reason: p.reason, payload: p.row })));
    this.metrics.integrity.deadLetters.inc({ source: 'quota_flush' }, poison.length);
    this.log.error(
      { keys: poison.length, reason: poison[0]!.reason },
      'quota counters refused by the database for their content: set aside in dead_letters (GET /api/v1/dead-letters), not flushed again',
    );
  }

  /** The dirty set's size, for the backlog gauge; null when the counters cannot be read. */
  async dirtyCount(): Promise<number | null> {
    try {
      const n = await this.counters.dirtyCount();
      this.metrics.integrity.quotaDirtyKeys.set(n);
      return n;
    } catch {
      return null;
    }
  }

  private async readd(members: string[]): Promise<number> {
    try {
      await this.counters.markDirty(members);
      this.um.quotaFlush.inc({ outcome: 're_added' }, members.length);
      return members.length;
    } catch (err) {
      // The counters still hold the values; only the dirty marks are gone (the next increment sets them again).
      this.um.quotaFlush.inc({ outcome: 'lost' }, members.length);
      this.log.error({ keys: members.length, err: (err as Error).message }, 'could not put quota keys back into the dirty set; their next increment marks them again');
      return 0;
    }
  }
}

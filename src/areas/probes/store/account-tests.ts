import type { Db, Queryable } from '../../../store/db.js';
import type { TestEffect } from '../../accounts/index.js';
import { iso, num, toDate } from '../../../store/db.js';
import { SetClause } from '../../../store/set-clause.js';
import { claimDue, heldBy, leaseFree, releaseLease, type LeaseTable } from '../../../store/claim-queue.js';
import type { ClaimedPlan, PlanInput, PlanView, TestOutcome, TestResultView } from './account-test-types.js';

export type { ClaimedPlan, PlanInput, PlanView, TestOutcome, TestResultView } from './account-test-types.js';

const VIEW = `id, account_id, cron, timezone, model, max_results, auto_recover, enabled, next_run_at, last_run_at, last_ok, missed, created_at, updated_at`;
/** One key for the claim's transaction lock: claims are serialised so the cluster-wide cap holds. */
const CLAIM_LOCK = 0x7e57_0001;
/** A plan's lease (`claim-queue.ts`): `lease_alive_key` (migration 021) is the claimer's liveness key, so a dead claimer's plan is free at once. */
const PLANS: LeaseTable = { table: 'account_test_plans', key: 'id', owner: 'lease_owner', until: 'lease_until', fence: 'fence', aliveKey: 'lease_alive_key' };
// $1 owner, $2 wanted, $3 cluster-wide cap, $4 lease ms, $5 the claimer's liveness key.
// The cap counts live leases only: a lease whose holder died no longer holds a slot of the cap.
const CLAIM = claimDue(PLANS, {
  with: [`busy AS (SELECT count(*) AS n FROM account_test_plans WHERE NOT ${leaseFree(PLANS)})`],
  due: 'enabled AND next_run_at <= clock_timestamp()',
  order: 'next_run_at',
  limit: 'GREATEST(0, LEAST($2::bigint, $3::bigint - (SELECT n FROM busy)))',
  owner: '$1',
  leaseMs: '$4',
  aliveKey: '$5',
  // due_now is cleared by the write that ends the test (finish or skip), so a takeover of a dead claimer's immediate test is still immediate.
  returning: 't.id, t.fence, t.account_id, t.cron, t.timezone, t.model, t.max_results, t.auto_recover, t.next_run_at AS occurrence, t.due_now, clock_timestamp() AS claimed_at',
});

function toView(r: Record<string, unknown>): PlanView {
  return {
    id: num(r.id),
    account_id: num(r.account_id),
    cron: String(r.cron),
    timezone: String(r.timezone),
    model: String(r.model),
    max_results: num(r.max_results),
    auto_recover: Boolean(r.auto_recover),
    enabled: Boolean(r.enabled),
    next_run_at: iso(r.next_run_at)!,
    last_run_at: iso(r.last_run_at),
    last_ok: r.last_ok === null || r.last_ok === undefined ? null : Boolean(r.last_ok),
    missed: num(r.missed),
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  };
}

/**
 * Scheduled account-test plans. A due plan is claimed with one UPDATE … RETURNING under a lease
 * and a fence (never read-then-run); its result, the pruning, the auto-recovery and the move of
 * next_run_at commit together under that fence, so an occurrence stores exactly one result and
 * next_run_at advances once, whoever ran it and whoever died on the way.
 */
export class AccountTests {
  constructor(private readonly db: Db) {}

  /** Due at once (`due_now`): a new plan is tested straight away, then on its phase slots. `at` replaces the database clock (tests). */
  async create(p: PlanInput, at: Date | null = null): Promise<PlanView> {
    const { rows } = await this.db.query(
      `INSERT INTO account_test_plans (account_id, cron, timezone, model, max_results, auto_recover, enabled, next_run_at, due_now)
       VALUES ($1, $2, $3, $4, $5, $6, $7, COALESCE($8::timestamptz, clock_timestamp()), true) RETURNING ${VIEW}`,
      [p.accountId, p.cron, p.timezone, p.model, p.maxResults, p.autoRecover, p.enabled, at],
    );
    return toView(rows[0]!);
  }

  async get(id: number): Promise<PlanView | null> {
    const { rows } = await this.db.query(`SELECT ${VIEW} FROM account_test_plans WHERE id = $1`, [id]);
    return rows[0] ? toView(rows[0]) : null;
  }

  async list(f: { limit: number; afterId: number; accountId?: number }): Promise<PlanView[]> {
    const { rows } = await this.db.query(`SELECT ${VIEW} FROM account_test_plans WHERE id > $1 AND ($3::bigint IS NULL OR account_id = $3) ORDER BY id LIMIT $2`, [
      f.afterId,
      f.limit,
      f.accountId ?? null,
    ]);
    return rows.map(toView);
  }

  /** An edit that changes when the plan fires (`testNow`) makes it due at once (`due_now`), then on its phase slots. */
  async update(id: number, p: Partial<PlanInput>, testNow: boolean, at: Date | null = null): Promise<PlanView | null> {
    const c = new SetClause(id);
    if (p.accountId !== undefined) c.set('account_id', p.accountId);
    if (p.cron !== undefined) c.set('cron', p.cron);
    if (p.timezone !== undefined) c.set('timezone', p.timezone);
    if (p.model !== undefined) c.set('model', p.model);
    if (p.maxResults !== undefined) c.set('max_results', p.maxResults);
    if (p.autoRecover !== undefined) c.set('auto_recover', p.autoRecover);
    if (p.enabled !== undefined) c.set('enabled', p.enabled);
    if (testNow) {
      if (at) c.set('next_run_at', at);
      else c.raw('next_run_at = clock_timestamp()');
      c.raw('due_now = true');
    }
    if (c.empty) return this.get(id);
    const { rows } = await this.db.query(`UPDATE account_test_plans SET ${c} WHERE id = $1 RETURNING ${VIEW}`, c.params);
    return rows[0] ? toView(rows[0]) : null;
  }

  async delete(id: number): Promise<boolean> {
    const { rowCount } = await this.db.query(`DELETE FROM account_test_plans WHERE id = $1`, [id]);
    return rowCount === 1;
  }

  async results(planId: number, limit: number): Promise<TestResultView[]> {
    const { rows } = await this.db.query(
      `SELECT occurrence, started_at, ok, status, latency_ms, ttfb_ms, error_class, recovered, instance_id FROM account_test_results
       WHERE plan_id = $1 ORDER BY occurrence DESC LIMIT $2`,
      [planId, limit],
    );
    return rows.map((r) => ({
      occurrence: iso(r.occurrence)!,
      started_at: iso(r.started_at)!,
      ok: Boolean(r.ok),
      status: r.status === null ? null : num(r.status),
      latency_ms: num(r.latency_ms),
      ttfb_ms: r.ttfb_ms === null ? null : num(r.ttfb_ms),
      error_class: (r.error_class as string) ?? null,
      recovered: Boolean(r.recovered),
      instance_id: String(r.instance_id),
    }));
  }

  /**
   * Claims due plans for `owner`, never more than `cap` leased at once in the whole cluster: the
   * count and the claim happen under one transaction-scoped advisory lock, so two replicas cannot
   * both see a free slot. A plan leased by a replica whose liveness key no session holds any more
   * (`aliveKey`, `coordination/liveness.ts`) is claimable at once, not after its lease.
   */
  async claim(owner: string, want: number, cap: number, leaseMs: number, aliveKey: number | null = null): Promise<ClaimedPlan[]> {
    return this.db.tx(async (q) => {
      await q.query(`SELECT pg_advisory_xact_lock($1)`, [CLAIM_LOCK]);
      const { rows } = await q.query(CLAIM, [owner, want, cap, leaseMs, aliveKey]);
      return rows.map((r) => ({
        id: num(r.id),
        fence: num(r.fence),
        accountId: num(r.account_id),
        cron: String(r.cron),
        timezone: String(r.timezone),
        model: String(r.model),
        maxResults: num(r.max_results),
        autoRecover: Boolean(r.auto_recover),
        occurrence: toDate(r.occurrence)!,
        dueNow: Boolean(r.due_now),
        claimedAt: toDate(r.claimed_at)!,
      }));
    });
  }

  /**
   * A claimed slot more than half an interval late is not tested: the plan moves to `nextRunAt`,
   * the skipped slots are counted in `missed`, and the lease is released, under the claim's fence
   * (false when it was overtaken: nothing written).
   */
  async skip(plan: ClaimedPlan, missed: number, nextRunAt: Date): Promise<boolean> {
    const { rowCount } = await this.db.query(
      releaseLease(PLANS, { key: '$1', fence: '$2', set: ['next_run_at = GREATEST(next_run_at, $3)', 'missed = missed + $4', 'due_now = false', 'updated_at = clock_timestamp()'] }),
      [plan.id, plan.fence, nextRunAt, missed],
    );
    return rowCount === 1;
  }

  /**
   * Commits one test under its fence: the result (once per occurrence), the pruning to
   * max_results, next_run_at, the lease release and what the result does to the account
   * (`accountEffect`: the accounts area's own statement, run in this transaction: error, rate
   * limit, auto_recover). Returns null when the fence was overtaken (nothing written).
   */
  async finish(plan: ClaimedPlan, owner: string, out: TestOutcome, nextRunAt: Date, missed: number, accountEffect: (q: Queryable) => Promise<TestEffect>): Promise<{ effect: TestEffect } | null> {
    return this.db.tx(async (q) => {
      // The fence check comes first and locks the row: a stale claimer writes nothing at all.
      const held = await q.query(`SELECT 1 FROM account_test_plans WHERE id = $1 AND ${heldBy(PLANS, { fence: '$2' })} FOR UPDATE`, [plan.id, plan.fence]);
      if (!held.rows[0]) return null;
      const effect = await accountEffect(q);
      const recovered = effect.recovered;
      await q.query(
        `INSERT INTO account_test_results (plan_id, account_id, occurrence, started_at, ok, status, latency_ms, ttfb_ms, error_class, recovered, instance_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (plan_id, occurrence) DO NOTHING`,
        [plan.id, plan.accountId, plan.occurrence, out.startedAt, out.ok, out.status, out.latencyMs, out.ttfbMs, out.errorClass, recovered, owner],
      );
      await q.query(`DELETE FROM account_test_results WHERE plan_id = $1 AND id NOT IN (SELECT id FROM account_test_results WHERE plan_id = $1 ORDER BY occurrence DESC LIMIT $2)`, [
        plan.id,
        plan.maxResults,
      ]);
      await q.query(
        releaseLease(PLANS, {
          key: '$1',
          fence: '$2',
          set: ['next_run_at = GREATEST(next_run_at, $3)', 'last_run_at = $4', 'last_ok = $5', 'missed = missed + $6', 'due_now = false', 'updated_at = clock_timestamp()'],
        }),
        [plan.id, plan.fence, nextRunAt, out.startedAt, out.ok, missed],
      );
      return { effect };
    });
  }

  async audit(accountId: number, limit: number): Promise<Array<{ action: string; actor: string; detail: unknown; created_at: string }>> {
    const { rows } = await this.db.query(`SELECT action, actor, detail, created_at FROM account_audit WHERE account_id = $1 ORDER BY id DESC LIMIT $2`, [accountId, limit]);
    return rows.map((r) => ({ action: String(r.action), actor: String(r.actor), detail: typeof r.detail === 'string' ? JSON.parse(r.detail) : r.detail, created_at: iso(r.created_at)! }));
  }

  /** What scheduled_account_test's round reports: tests whose result was written after `after` (null: none yet), and the database time read. Read-only. */
  async ranSince(after: Date | null): Promise<{ ran: number; failed: number; upto: Date }> {
    const { rows } = await this.db.query(
      `SELECT count(*) AS ran, count(*) FILTER (WHERE NOT ok) AS failed, now() AS upto FROM account_test_results WHERE started_at > coalesce($1::timestamptz, now() - interval '1 hour') AND started_at <= now()`,
      [after?.toISOString() ?? null],
    );
    return { ran: num(rows[0]!.ran), failed: num(rows[0]!.failed), upto: toDate(rows[0]!.upto)! };
  }

  /** Enabled plans with a free lease (none, expired, or its holder dead) more than `ms` past their next_run_at, and the oldest's due time (for the job's health). Read-only. */
  async overdueSince(ms: number): Promise<{ overdue: number; oldestDueAt: Date | null }> {
    const { rows } = await this.db.query(
      `SELECT count(*) AS n, min(next_run_at) AS oldest FROM account_test_plans
        WHERE enabled AND next_run_at < now() - make_interval(secs => $1::double precision / 1000) AND ${leaseFree(PLANS, 'now()')}`,
      [ms],
    );
    return { overdue: num(rows[0]!.n), oldestDueAt: toDate(rows[0]!.oldest) };
  }

  /** Enabled plans more than `ms` past their next_run_at (replicas down, or the cap too small). */
  async overdue(ms: number): Promise<number> {
    const { rows } = await this.db.query(`SELECT count(*) AS n FROM account_test_plans WHERE enabled AND next_run_at < now() - make_interval(secs => $1::double precision / 1000)`, [ms]);
    return num(rows[0]!.n);
  }
}

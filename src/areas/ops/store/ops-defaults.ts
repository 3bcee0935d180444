import type { Db } from '../../../store/db.js';
import { num } from '../../../store/db.js';
import type { RuleInput } from './ops-alerts.js';

/**
 * The default alert rules' record (`ops_default_rules`) and the per-replica counter increments
 * (`ops_counter_increments`).
 */
export class OpsDefaults {
  constructor(private readonly db: Db) {}

  /**
   * Installs the defaults not recorded yet, in one transaction: the keys are recorded first (their
   * primary key makes a second replica starting at once wait, then find them), then each new key's rule is
   * created (a rule of the same name the operator made stays, and the key is recorded all the
   * same). A key recorded once is never installed again, so a deleted default stays deleted.
   * Returns the keys installed now.
   */
  async install(defaults: ReadonlyArray<{ key: string; rule: RuleInput }>): Promise<string[]> {
    return this.db.tx(async (q) => {
      const installed: string[] = [];
      // Every key in one statement (a start after the first records none: one statement, not one a default).
      const { rows: claimed } = await q.query<{ key: string }>(`INSERT INTO ops_default_rules (key) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT (key) DO NOTHING RETURNING key`, [
        defaults.map((d) => d.key),
      ]);
      const fresh = new Set(claimed.map((c) => c.key));
      for (const d of defaults) {
        if (!fresh.delete(d.key)) continue; // delete: a key listed twice is installed once
        const r = d.rule;
        const { rows } = await q.query<{ id: unknown }>(
          `INSERT INTO ops_alert_rules (name, metric, operator, threshold, window_seconds, sustained, severity, cooldown_seconds, labels, selector, enabled, notify)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, NULL, $10, $11) ON CONFLICT (name) DO NOTHING RETURNING id`,
          [r.name, r.metric, r.operator, r.threshold, r.window_seconds, r.sustained, r.severity, r.cooldown_seconds, JSON.stringify(r.labels), r.enabled, r.notify],
        );
        if (rows[0]) await q.query(`UPDATE ops_default_rules SET rule_id = $2 WHERE key = $1`, [d.key, num(rows[0].id)]);
        installed.push(d.key);
      }
      return installed;
    });
  }

  /** The defaults ever installed: key → the rule it became (null when a rule of that name existed). */
  async recorded(): Promise<Map<string, number | null>> {
    const { rows } = await this.db.query<{ key: string; rule_id: unknown }>(`SELECT key, rule_id FROM ops_default_rules`);
    return new Map(rows.map((r) => [r.key, r.rule_id === null ? null : num(r.rule_id)]));
  }

  /** One replica's counter rises since its last report (only the ones that rose). */
  async addIncrements(instanceId: string, rises: Record<string, number>): Promise<void> {
    const names = Object.keys(rises).filter((k) => rises[k]! > 0);
    if (!names.length) return;
    await this.db.query(`INSERT INTO ops_counter_increments (instance_id, name, n) SELECT $1, * FROM unnest($2::text[], $3::bigint[])`, [instanceId, names, names.map((k) => Math.round(rises[k]!))]);
  }

  /** Every replica's rises reported in [from, to), summed by counter. */
  async increments(from: Date, to: Date): Promise<Record<string, number>> {
    const { rows } = await this.db.query<{ name: string; n: unknown }>(`SELECT name, sum(n) AS n FROM ops_counter_increments WHERE at >= $1 AND at < $2 GROUP BY name`, [from, to]);
    return Object.fromEntries(rows.map((r) => [r.name, num(r.n)]));
  }
}

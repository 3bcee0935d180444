import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { ManualClock, systemClock } from '../src/time/clock.js';
import { sqlNow } from '../src/store/sql-now.js';
import { outcomeOf } from './helpers/rounds.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const DAY = 86_400_000;

/**
 * Time is a parameter (issue 48): SQL that compares with now takes the injected clock's time
 * (`coalesce($now, clock_timestamp())`), so a test moves a ManualClock instead of waiting, and
 * production (the system clock) passes null: the database's clock decides.
 */
describe('SQL now from the injected clock', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  const clock = new ManualClock(Date.now());
  const prefix = uniqueName('rjsqlnow');

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const config = loadConfig({
      env: { DATABASE_URL: db.url, REDIS_URL, RELAY_JOBS_INSTANCE_ID: 'now-1', RELAY_JOBS_ENV: 'test', RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY, RELAY_JOBS__REDIS__KEY_PREFIX: prefix },
    });
    rt = await Runtime.create(config, { logger: silentLogger(), clock });
  });
  afterAll(async () => {
    await rt?.shutdown();
    await sql?.end();
    await db?.drop();
    await dropRedisPrefix(prefix);
  });

  it('is null on the system clock (the database decides) and the manual clock’s time otherwise', () => {
    expect(sqlNow(systemClock)).toBeNull();
    expect(sqlNow(new ManualClock(Date.UTC(2030, 0, 1)))).toEqual(new Date(Date.UTC(2030, 0, 1)));
  });

  it('subscription_expiry expires a 30-day subscription once the clock is moved past its end, with no wait', async () => {
    const { rows: plan } = await sql.query<{ id: number }>(`INSERT INTO plans (name, price, duration_days) VALUES ('monthly', 100, 30) RETURNING id`);
    const { rows: user } = await sql.query<{ id: number }>(`INSERT INTO billing_users (external_id) VALUES ('u-now') RETURNING id`);
    await sql.query(`INSERT INTO subscriptions (user_id, plan_id, starts_at, expires_at) VALUES ($1, $2, now(), now() + interval '30 days')`, [user[0]!.id, plan[0]!.id]);
    const status = async () => (await sql.query<{ status: string }>(`SELECT status FROM subscriptions WHERE user_id = $1`, [user[0]!.id])).rows[0]!.status;

    expect(outcomeOf(await rt.runNow('subscription_expiry'))?.status).not.toBe('failed');
    expect(await status()).toBe('active');
    await clock.advance(29 * DAY);
    outcomeOf(await rt.runNow('subscription_expiry'));
    expect(await status()).toBe('active');
    await clock.advance(2 * DAY);
    const out = outcomeOf(await rt.runNow('subscription_expiry'));
    expect(out?.note).toMatch(/^1 expired/);
    expect(await status()).toBe('expired');
  });
});

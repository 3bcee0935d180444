import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Accounts } from '../src/areas/accounts/store/accounts.js';
import { SecretBox } from '../src/store/secret-box.js';
import type { Db } from '../src/store/db.js';
import { BACKENDS } from './helpers/backends.js';
import { TEST_MASTER_KEY } from './helpers/services.js';

/**
 * The token refresh service learns of new and changed accounts by reading rows stamped
 * (`updated_at`) at or after its last watermark. A row is stamped when written, not when its
 * transaction commits: the soak imported 500 accounts a request right after a start, and on a
 * loaded machine the accounts written first in a long import transaction committed after a read
 * whose watermark had passed their stamps; they were never scheduled for refresh. The watermark
 * is held back to the start of the oldest transaction still open, so the next read sees them.
 */
describe.each(BACKENDS)('refresh candidates watermark ($name)', (backend) => {
  let env: Awaited<ReturnType<typeof backend.open>>;
  let accounts: Accounts;
  const creds = { access_token: 'at-secret', refresh_token: 'rt-secret' };
  beforeAll(async () => {
    env = await backend.open();
    accounts = new Accounts(env.db as Db, SecretBox.fromBase64(TEST_MASTER_KEY));
  });
  afterAll(async () => env.cleanup());

  it('a read answers rows changed at or after its watermark and a watermark no later than the database clock', async () => {
    const { dbNow } = await accounts.candidates(null);
    const a = await accounts.create({ platform: 'openai', name: 'w-plain', credentials: creds, tokenExpiresAt: new Date(Date.now() + 3_600_000) });
    const { rows, dbNow: next } = await accounts.candidates(dbNow);
    expect(rows.map((r) => r.id)).toContain(a.id);
    expect(next.getTime()).toBeGreaterThanOrEqual(dbNow.getTime());
  });
});

// PGlite serves one connection: no transaction of another session can be open while it reads.
describe('refresh candidates watermark behind a long transaction (PostgreSQL)', () => {
  let env: Awaited<ReturnType<(typeof BACKENDS)[number]['open']>>;
  let accounts: Accounts;
  beforeAll(async () => {
    env = await BACKENDS.find((b) => b.name === 'postgres')!.open();
    accounts = new Accounts(env.db as Db, SecretBox.fromBase64(TEST_MASTER_KEY));
  });
  afterAll(async () => env.cleanup());

  it('a row written early in a transaction that commits after a read is seen by the next read', async () => {
    const importer = new pg.Client({ connectionString: env.url });
    await importer.connect();
    try {
      await importer.query('BEGIN');
      const { rows: ins } = await importer.query<{ id: string }>(
        `INSERT INTO accounts (platform, name, credentials_sealed, has_refresh_token, token_expires_at) VALUES ('openai', 'w-long-import', 'x', true, now() + interval '1 hour') RETURNING id`,
      );
      // The import goes on; meanwhile the service reads (the row is not visible yet) and takes its watermark.
      await importer.query('SELECT pg_sleep(0.2)');
      const during = await accounts.candidates(null);
      expect(during.rows.map((r) => r.id)).not.toContain(Number(ins[0]!.id));
      await importer.query('COMMIT');
      const after = await accounts.candidates(during.dbNow);
      expect(
        after.rows.map((r) => r.id),
        'the committed row is read after the watermark of the read that could not see it',
      ).toContain(Number(ins[0]!.id));
    } finally {
      await importer.end();
    }
  });
});

import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { PgliteDb } from '../src/store/pglite-db.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { runCli } from './helpers/cli.js';
import { embeddedDataDir } from './helpers/pglite-template.js';

describe('backup in embedded mode (PGlite dumpDataDir)', () => {
  const dataDir = embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-embedded-'))); // migrated copy: no cold PGlite open
  const restoredDir = mkdtempSync(join(tmpdir(), 'rj-embedded-restored-'));
  let rt: Runtime | null = null;
  afterAll(async () => {
    await rt?.shutdown();
  });

  it('dumps the data directory gzipped with its SHA-256 under <data_dir>/backups, and restores it into a new data directory', { timeout: 120_000 }, async () => {
    rt = await Runtime.create(loadConfig({ env: { RELAY_JOBS_DATA_DIR: dataDir } }), { logger: silentLogger(), register: false });
    await rt.db.query(`INSERT INTO billing_users (external_id, balance) SELECT 'e' || g, g FROM generate_series(1, 300) g`);
    const rec = await (await rt.services.backup.start('manual')).done;
    expect(rec.error).toBeNull();
    expect(rec.state).toBe('completed'); // no scratch server to verify against in embedded mode
    expect(rec.format).toBe('pglite');
    expect(rec.location.startsWith(join(dataDir, 'backups', 'local', 'embedded'))).toBe(true);
    const bytes = readFileSync(rec.location);
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(rec.sha256);
    expect(gunzipSync(bytes).subarray(257, 262).toString()).toBe('ustar');
    expect(rec.table_counts!['public.billing_users']).toBe(300);
    await rt.shutdown();
    rt = null;

    const r = await runCli(['restore', rec.location, '--target', restoredDir], {}, 90_000);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/restored \d+ tables, \d+ rows into/);
    const db = await PgliteDb.open(restoredDir);
    try {
      expect((await db.query<{ n: number }>('SELECT count(*)::int AS n, sum(balance)::int AS s FROM billing_users')).rows[0]).toEqual({ n: 300, s: 45150 });
    } finally {
      await db.close();
    }
    // Again without --force: refused, the restored data untouched.
    const again = await runCli(['restore', rec.location, '--target', restoredDir], {}, 90_000);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/refusing to restore into .*: its pgdata is not empty; pass --force to replace it/);
  });
});

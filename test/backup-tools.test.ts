import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkTool } from '../src/areas/backup/pg-tools.js';
import { compareCounts } from '../src/areas/backup/verifier.js';

describe('pg_dump/pg_restore checks', () => {
  it("accepts the tools of the server's major version", async () => {
    expect(await checkTool('pg_dump', 150020)).toBe('pg_dump');
  });

  it('names a missing binary and a version mismatch, in one line', async () => {
    const missing = join(tmpdir(), 'no-such-pg-bin');
    await expect(checkTool('pg_dump', 150020, missing)).rejects.toThrow(`${missing}/pg_dump not found (backup.pg_bin_dir): install the PostgreSQL 15 client tools or set backup.pg_bin_dir`);
    await expect(checkTool('pg_restore', 150020, undefined).then(() => checkTool('pg_restore', 160001))).rejects.toThrow(
      /^pg_restore is PostgreSQL 15 but the server is PostgreSQL 16: install the 16 client tools or point backup.pg_bin_dir at them$/,
    );
    const dir = mkdtempSync(join(tmpdir(), 'rj-fake-pg-'));
    writeFileSync(join(dir, 'pg_dump'), '#!/bin/sh\necho "pg_dump (PostgreSQL) 14.11"\n');
    chmodSync(join(dir, 'pg_dump'), 0o755);
    await expect(checkTool('pg_dump', 150020, dir)).rejects.toThrow(`${dir}/pg_dump is PostgreSQL 14 but the server is PostgreSQL 15`);
  });

  it('row-count comparison names the first differing table', () => {
    expect(compareCounts({ 'public.a': 1, 'public.b': 2 }, { 'public.a': 1, 'public.b': 2 })).toBeNull();
    expect(compareCounts({ 'public.a': 1 }, {})).toBe(`table public.a: 1 rows in the dump's snapshot, missing after restore`);
    expect(compareCounts({}, { 'public.x': 0 })).toBe(`table public.x: restored but not in the dump's snapshot`);
  });
});

import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { lockedPick } from '../src/store/claim-queue.js';

const SRC = fileURLToPath(new URL('../src', import.meta.url));

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? tsFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

/** Issue 48: one builder writes `SKIP LOCKED` (store/claim-queue.ts `lockedPick`); stores call it instead of writing the clause. */
describe('SKIP LOCKED in one place', () => {
  it('no source file but store/claim-queue.ts writes SKIP LOCKED', () => {
    const writers = tsFiles(SRC)
      .filter((f) => /SKIP\s+LOCKED/i.test(readFileSync(f, 'utf8')))
      .map((f) => relative(SRC, f));
    expect(writers).toEqual(['store/claim-queue.ts']);
  });

  it('lockedPick builds the clause with its order, limit and locked table', () => {
    expect(lockedPick({ select: 'id', from: 'q, n', where: 'due', order: 'id', limit: '$1', of: 'q' })).toBe('SELECT id FROM q, n WHERE due ORDER BY id LIMIT $1 FOR UPDATE OF q SKIP LOCKED');
    expect(lockedPick({ select: 'seq', from: 'state' })).toBe('SELECT seq FROM state FOR UPDATE SKIP LOCKED');
  });
});

/** Issue 48: one definition of a free lease (store/liveness-sql.ts `leaseFreeSql`); every lease's SQL is built from it. */
describe('the lease rule in one place', () => {
  it('no source file but store/liveness-sql.ts builds the holder-liveness test (a call of holderAliveSql) into its SQL', () => {
    const writers = tsFiles(SRC)
      .filter((f) => /holderAliveSql\(/.test(readFileSync(f, 'utf8')))
      .map((f) => relative(SRC, f));
    expect(writers).toEqual(['store/liveness-sql.ts']);
  });
});

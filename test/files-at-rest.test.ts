import { afterAll, describe, expect, it } from 'vitest';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, lstatSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ServiceProcess, runCli } from './helpers/cli.js';
import { freePort } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';

/** Every path under `root` with its mode, for the ones other users could read or enter. */
function readableByOthers(root: string): string[] {
  const out: string[] = [];
  const visit = (p: string) => {
    const st = lstatSync(p);
    if (st.isSymbolicLink()) return;
    if (st.mode & 0o077) out.push(`${p} ${(st.mode & 0o777).toString(8)}`);
    if (st.isDirectory()) for (const n of readdirSync(p)) visit(join(p, n));
  };
  visit(root);
  return out;
}

/** chmod 0600 / 0700 on every path under `root`: a data directory as the current version leaves it at rest. */
function makePrivate(root: string): void {
  const st = lstatSync(root);
  if (st.isSymbolicLink()) return;
  chmodSync(root, st.isDirectory() ? 0o700 : 0o600);
  if (st.isDirectory()) for (const n of readdirSync(root)) makePrivate(join(root, n));
}

function countPaths(root: string): number {
  let n = 0;
  const visit = (p: string) => {
    n++;
    if (lstatSync(p).isDirectory()) for (const c of readdirSync(p)) visit(join(p, c));
  };
  visit(root);
  return n;
}

/** Files at rest (issue 23, item 5): the embedded data directory, backups and spill files are the service user's only. */
describe('files at rest', () => {
  const base = mkdtempSync(join(tmpdir(), 'rj-perms-'));
  let svc: ServiceProcess | null = null;
  afterAll(async () => {
    if (svc && svc.proc.exitCode === null) {
      svc.proc.kill('SIGTERM');
      await svc.exited;
    }
    rmSync(base, { recursive: true, force: true });
  });

  it('embedded start tightens what an older version left (one log line with the count); everything created is 0600/0700; a backup is 0600', async () => {
    const dataDir = join(base, 'data');
    const backupDir = join(base, 'backups');
    // A migrated database at rest (a copy of the template: no cold PGlite open), then what an older
    // version (no umask) left behind beside it: world-readable files and folders.
    embeddedDataDir(dataDir);
    makePrivate(dataDir);
    mkdirSync(join(dataDir, 'objects', 'image-batches', '7'), { recursive: true });
    writeFileSync(join(dataDir, 'objects', 'image-batches', '7', 'p0-0.png'), 'png');
    writeFileSync(join(dataDir, 'old-spill.jsonl'), '{}\n');
    for (const p of [dataDir, join(dataDir, 'objects'), join(dataDir, 'objects', 'image-batches'), join(dataDir, 'objects', 'image-batches', '7')]) chmodSync(p, 0o755);
    for (const p of [join(dataDir, 'objects', 'image-batches', '7', 'p0-0.png'), join(dataDir, 'old-spill.jsonl')]) chmodSync(p, 0o666);
    const before = readableByOthers(dataDir).length;
    expect(before).toBe(6);

    const port = await freePort();
    const env = { RELAY_JOBS_DATA_DIR: dataDir, RELAY_JOBS_HTTP_PORT: String(port), RELAY_JOBS_ADMIN_TOKEN: 'an-admin-token-0123456789', RELAY_JOBS__BACKUP__DIR: backupDir };
    // The daily backup's slot would make `backup --wait` busy if it fell inside the test: once a year instead.
    svc = ServiceProcess.start('perms', { ...env, RELAY_JOBS__JOBS__BACKUP__CRON: '0 0 1 1 *' });
    const line = JSON.parse(await svc.waitForLine(/paths tightened/, 480_000)) as { tightened: number; msg: string };
    expect(line.tightened).toBe(before);
    expect(line.msg).toBe(`data directory: ${before} paths tightened to 0600/0700`);
    await svc.waitForLine(/relay-jobs started/, 240_000);

    const b = await runCli(['backup', '--wait'], env, 180_000);
    expect(b.code, b.stdout + b.stderr).toBe(0);
    const backups = readdirSync(backupDir, { recursive: true }).map(String);
    expect(backups.length, backups.join(', ')).toBeGreaterThan(0);
    expect((lstatSync(backupDir).mode & 0o777).toString(8)).toBe('700');
    for (const f of backups) {
      const st = lstatSync(join(backupDir, f));
      expect(`${f} ${(st.mode & 0o777).toString(8)}`).toBe(`${f} ${st.isDirectory() ? '700' : '600'}`);
    }

    // While it runs: every folder is 0700, so nothing in it is reachable by another user (PGlite's WASM file
    // system creates files 0666 whatever the umask; they are tightened once open, and at exit).
    const total = countPaths(dataDir);
    expect(total).toBeGreaterThan(100);
    const running = readableByOthers(dataDir);
    expect(running.filter((p) => !/ 6\d\d$/.test(p) || / 7\d\d$/.test(p))).toEqual([]);
    expect(running.filter((p) => / [1-7][0-7][0-7]$/.test(p) && lstatSync(p.split(' ')[0]!).isDirectory())).toEqual([]);

    svc.proc.kill('SIGTERM');
    expect(await svc.exitedWithin()).toBe(0);
    // At rest: every file 0600, every folder 0700.
    expect(readableByOthers(dataDir), `of ${countPaths(dataDir)} paths`).toEqual([]);
    console.log(
      `embedded data dir: ${total} paths; ${before} pre-existing paths tightened at start; while running ${running.length} PGlite files 0666 inside 0700 folders; at rest none readable by others; ${backups.length} backup files 0600`,
    );
    expect(readableByOthers(backupDir)).toEqual([]);
  }, 840_000);
});

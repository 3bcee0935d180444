import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { UserError } from '../../config/errors.js';

/**
 * The server's own dump tools, run as child processes. A connection URL is passed without its
 * password (that goes in PGPASSWORD), so the password never shows in `ps`.
 */
export type PgTool = 'pg_dump' | 'pg_restore';

export function toolPath(tool: PgTool, binDir?: string): string {
  return binDir ? join(binDir, tool) : tool;
}

function connEnv(url: string): { dbname: string; env: NodeJS.ProcessEnv } {
  const u = new URL(url);
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (u.password) env.PGPASSWORD = decodeURIComponent(u.password);
  u.password = '';
  return { dbname: u.toString(), env };
}

/** The tool's major version, checked against the server's; a one-line UserError naming the binary otherwise. */
export async function checkTool(tool: PgTool, serverVersionNum: number, binDir?: string): Promise<string> {
  const path = toolPath(tool, binDir);
  const out = await new Promise<string>((resolve, reject) => {
    execFile(path, ['--version'], { timeout: 10_000 }, (err, stdout) => {
      if (err) {
        const code = (err as NodeJS.ErrnoException).code;
        reject(
          new UserError(
            code === 'ENOENT'
              ? `${path} not found${binDir ? ' (backup.pg_bin_dir)' : ' on PATH'}: install the PostgreSQL ${Math.floor(serverVersionNum / 10000)} client tools or set backup.pg_bin_dir`
              : `${path} --version failed: ${err.message.split('\n')[0]}`,
          ),
        );
      } else resolve(stdout);
    });
  });
  const m = /\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?/.exec(out);
  if (!m) throw new UserError(`${path} --version printed ${JSON.stringify(out.trim())}, not a PostgreSQL version`);
  const major = Number(m[1]);
  const serverMajor = Math.floor(serverVersionNum / 10000);
  if (major !== serverMajor) {
    throw new UserError(`${path} is PostgreSQL ${major} but the server is PostgreSQL ${serverMajor}: install the ${serverMajor} client tools or point backup.pg_bin_dir at them`);
  }
  return path;
}

export interface ToolProcess {
  proc: ChildProcess;
  /** Resolves on exit 0; rejects with a one-line error carrying the tool's last stderr line. */
  done: Promise<void>;
}

function watch(tool: string, proc: ChildProcess, onLine?: (line: string) => void): ToolProcess {
  let last = '';
  let buf = '';
  proc.stderr!.setEncoding('utf8');
  proc.stderr!.on('data', (d: string) => {
    buf += d;
    const lines = buf.split('\n');
    buf = lines.pop()!;
    for (const l of lines) {
      if (/error|fatal/i.test(l) || !last) last = l.trim() || last;
      onLine?.(l);
    }
  });
  const done = new Promise<void>((resolve, reject) => {
    proc.on('error', (err) => reject(new UserError(`${tool} could not start: ${err.message}`)));
    proc.on('close', (code, signal) => {
      if (buf) last = buf.trim() || last;
      if (code === 0) resolve();
      else reject(new UserError(`${tool} failed (${signal ? `signal ${signal}` : `exit ${code}`}): ${last.replace(/^(pg_dump|pg_restore): /, '') || 'no message'}`));
    });
  });
  return { proc, done };
}

/** `pg_dump -Fc` of the snapshot, uncompressed (the stream is gzipped once, by the caller). */
export function spawnDump(path: string, url: string, snapshot: string | null): ToolProcess & { stdout: Readable } {
  const { dbname, env } = connEnv(url);
  const args = ['--format=custom', '--compress=0', '--no-password', `--dbname=${dbname}`];
  if (snapshot) args.push(`--snapshot=${snapshot}`);
  const proc = spawn(path, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  return { ...watch('pg_dump', proc), stdout: proc.stdout! };
}

/**
 * `pg_restore` reading a custom-format archive on stdin, in one transaction and stopping at
 * the first error: a failed restore leaves nothing of itself behind. `onTable` sees each
 * table whose data it starts loading.
 */
export function spawnRestore(path: string, url: string, onTable?: (table: string) => void): ToolProcess & { stdin: Writable } {
  const { dbname, env } = connEnv(url);
  const args = ['--no-owner', '--no-privileges', '--single-transaction', '--exit-on-error', '--no-password', '--verbose', `--dbname=${dbname}`];
  const proc = spawn(path, args, { env, stdio: ['pipe', 'ignore', 'pipe'] });
  const tp = watch('pg_restore', proc, (line) => {
    const m = /processing data for table "([^"]+)"/.exec(line);
    if (m) onTable?.(m[1]!);
  });
  // pg_restore exiting early closes its stdin: the writer's EPIPE is reported through `done`.
  proc.stdin!.on('error', () => undefined);
  return { ...tp, stdin: proc.stdin! };
}

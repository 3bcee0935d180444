/**
 * wrk (Debian's `wrk` package: `apt-get install -y wrk`) driven from the hot path bench: one run
 * against one URL with a Lua script for the method, headers and body, parsed into requests/s and
 * latency percentiles. wrk, not a Node client: the load generator must not share the bench
 * process's event loop, and wrk's own CPU is small beside a Node client's.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface WrkResult {
  requestsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  /** Non-2xx/3xx answers and socket errors: the bench fails a figure that has any. */
  errors: number;
}

export interface WrkRun {
  url: string;
  /** Lua for wrk's `-s`: sets wrk.method, wrk.headers, wrk.body, or defines request(). */
  script: string;
  seconds: number;
  threads?: number;
  connections?: number;
}

const ms = (v: string, unit: string) => Number(v) * ({ us: 0.001, ms: 1, s: 1000, m: 60_000 } as Record<string, number>)[unit]!;

/** Parses `wrk --latency` output. */
export function parseWrk(out: string): WrkResult {
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
  const pct = (p: string) => {
    const m = new RegExp(`^\\s+${p}%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, 'm').exec(out);
    return m ? ms(m[1]!, m[2]!) : NaN;
  };
  const total = /(\d+) requests in/.exec(out);
  const non2xx = /Non-2xx or 3xx responses:\s+(\d+)/.exec(out);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  if (!rps || !total) throw new Error(`hotpath bench: could not read wrk's output:\n${out}`);
  const sockErrors = sock ? Number(sock[1]) + Number(sock[2]) + Number(sock[3]) + Number(sock[4]) : 0;
  return { requestsPerSec: Number(rps[1]), p50Ms: pct('50'), p99Ms: pct('99'), requests: Number(total[1]), errors: Number(non2xx?.[1] ?? 0) + sockErrors };
}

/** One wrk run; throws with wrk's message when it is missing or fails. */
export async function wrk(r: WrkRun): Promise<WrkResult> {
  const dir = await mkdtemp(join(tmpdir(), 'rj-wrk-'));
  try {
    const script = join(dir, 'run.lua');
    await writeFile(script, r.script);
    const args = ['-t', String(r.threads ?? 2), '-c', String(r.connections ?? 16), '-d', `${r.seconds}s`, '--latency', '-s', script, r.url];
    const out = await new Promise<string>((resolve, reject) =>
      execFile('wrk', args, { maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
        if (err) reject(new Error(`wrk ${args.join(' ')} failed (is Debian's wrk installed? apt-get install -y wrk): ${err.message}\n${stderr}`));
        else resolve(stdout);
      }),
    );
    return parseWrk(out);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A Lua string literal. */
const lua = (s: string) => JSON.stringify(s);

/** The script of a request with a fixed method, bearer token and body. */
export function fixedRequest(method: string, token: string | null, body?: unknown): string {
  const lines = [`wrk.method = ${lua(method)}`];
  if (token) lines.push(`wrk.headers["Authorization"] = ${lua(`Bearer ${token}`)}`);
  if (body !== undefined) lines.push(`wrk.headers["Content-Type"] = "application/json"`, `wrk.body = ${lua(JSON.stringify(body))}`);
  return lines.join('\n') + '\n';
}

/**
 * A usage batch of `size` events per request, each with a request id unique across the run (thread
 * number, request counter, index), so every event is a new row and none is a duplicate.
 */
export function usageBatchScript(token: string, size: number, tag: string): string {
  return `
local threads = 0
function setup(thread) threads = threads + 1; thread:set("tid", threads) end
local n = 0
function request()
  n = n + 1
  local parts = {}
  for i = 1, ${size} do
    parts[i] = '{"request_id":"${tag}-' .. tid .. '-' .. n .. '-' .. i .. '","user_id":"u' .. (i % 50) .. '","account_id":1,"platform":"openai","model":"gpt-bench","input_tokens":120,"output_tokens":40,"cost":"0.0012"}'
  end
  local body = '{"events":[' .. table.concat(parts, ",") .. ']}'
  return wrk.format("POST", nil, { ["Authorization"] = ${lua(`Bearer ${token}`)}, ["Content-Type"] = "application/json" }, body)
end
`;
}

/** One quota increment per request, spread over 1,000 users. */
export function quotaScript(token: string): string {
  return `
local n = 0
function request()
  n = n + 1
  local body = '{"increments":[{"user_id":"q' .. (n % 1000) .. '","platform":"openai","amount":7}]}'
  return wrk.format("POST", nil, { ["Authorization"] = ${lua(`Bearer ${token}`)}, ["Content-Type"] = "application/json" }, body)
end
`;
}

/**
 * The three forms `REDIS_URL` may take, parsed into what ioredis needs:
 *
 * - `redis://[user:pass@]host:port[/db]` (or `rediss://` for TLS): one node;
 * - `redis+sentinel://[user:pass@]host:port,host:port/<master>[/db][?sentinel_password=…]`
 *   (`rediss+sentinel://` for TLS to the data nodes): a Sentinel set; ioredis asks the sentinels
 *   for the current primary and follows failovers;
 * - `redis+cluster://[user:pass@]host:port,host:port` (`rediss+cluster://`): Redis Cluster seed
 *   nodes; the rest of the topology is discovered.
 *
 * The credentials are those of the data nodes. The WHATWG URL parser rejects a comma-separated
 * authority, so the authority is split here by hand; every error names `REDIS_URL` and never
 * echoes the password.
 */
import { EARLY_END } from './server-url.js';
export interface RedisNode {
  host: string;
  port: number;
}

interface Common {
  username?: string;
  password?: string;
  tls: boolean;
}

export type RedisTarget =
  | ({ kind: 'single'; url: string } & Common)
  | ({ kind: 'sentinel'; sentinels: RedisNode[]; master: string; db: number; sentinelPassword?: string } & Common)
  | ({ kind: 'cluster'; nodes: RedisNode[] } & Common);

const FORM = /^(rediss?)(\+sentinel|\+cluster)?:\/\/([^/?#]*)(\/[^?#]*)?(\?[^#]*)?$/;

export function parseRedisUrl(url: string): RedisTarget {
  const m = FORM.exec(url);
  if (!m && /^rediss?(\+sentinel|\+cluster)?:\/\/.*#/.test(url)) throw new Error('a # written raw (in the password?) ends the URL there: percent-encode it as %23');
  if (!m) throw new Error('expected redis://, rediss://, redis+sentinel://host:port,host:port/<master> or redis+cluster://host:port,host:port');
  const [, scheme, variant, authority, path = '', query = ''] = m;
  if (path.includes('@')) throw new Error(EARLY_END);
  const tls = scheme === 'rediss';
  if (!variant) return { kind: 'single', url, tls };
  const at = authority!.lastIndexOf('@');
  const userinfo = at >= 0 ? authority!.slice(0, at) : '';
  const hosts = at >= 0 ? authority!.slice(at + 1) : authority!;
  const colon = userinfo.indexOf(':');
  const username = decodePart(colon >= 0 ? userinfo.slice(0, colon) : userinfo, 'user name') || undefined;
  const password = colon >= 0 ? decodePart(userinfo.slice(colon + 1), 'password') || undefined : undefined;
  const nodes = hosts.split(',').map((h, i) => parseNode(h, i, variant === '+sentinel' ? 26379 : 6379));
  if (variant === '+cluster') {
    if (path && path !== '/') throw new Error('a redis+cluster:// URL takes no path (Redis Cluster has only database 0)');
    return { kind: 'cluster', nodes, username, password, tls };
  }
  const [master, db = '0'] = path.split('/').filter(Boolean);
  if (!master) throw new Error('a redis+sentinel:// URL needs the primary group name as its path (…/mymaster)');
  if (!/^\d{1,2}$/.test(db)) throw new Error(`the database after the primary group name must be a number, got "${db}"`);
  const rawSentinelPassword = /(?:^|&)sentinel_password=([^&]*)/.exec(query.slice(1))?.[1];
  const sentinelPassword = rawSentinelPassword === undefined ? undefined : decodePart(rawSentinelPassword.replace(/\+/g, ' '), 'sentinel_password');
  return { kind: 'sentinel', sentinels: nodes, master: decodePart(master, 'primary group name'), db: Number(db), username, password, sentinelPassword, tls };
}

function parseNode(text: string, index: number, defaultPort: number): RedisNode {
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+)(?::(\d{1,5}))?$/.exec(text);
  // Not quoted: a host part cut short by a raw / or ? in the password holds part of it.
  if (!m) throw new Error(`host ${index + 1} of the list is not host or host:port (an IPv6 address in [brackets]; a / or ? in the password percent-encoded: %2F, %3F)`);
  const port = m[2] ? Number(m[2]) : defaultPort;
  if (port < 1 || port > 65535) throw new Error(`host ${index + 1} of the list has port ${port}, outside 1-65535`);
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
}

/** One percent-encoded part of the URL, decoded; a bad encoding names the part, never its value (it may be a password). */
function decodePart(text: string, part: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new Error(`the ${part} has a bad percent-encoding (a % must be followed by two hex digits; write a literal % as %25)`);
  }
}

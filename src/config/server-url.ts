/**
 * Checks a server URL (PostgreSQL, a single Redis node) the way the drivers will read it, at
 * `config check` time instead of at the first connection: it parses, names a host (or, for
 * PostgreSQL, a `host=` socket directory), keeps its port within 1-65535, and its userinfo and
 * path decode (a literal `%` must be written `%25`). The message never echoes the URL: it may hold
 * a password. Returns the problem, or null.
 */
export function serverUrlProblem(url: string, kind: 'postgres' | 'redis'): string | null {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return 'not a valid URL (check the port, which must be 1-65535, and characters such as spaces, @ or # in the password: percent-encode them)';
  }
  if (u.hash.includes('@') || u.pathname.includes('@')) return EARLY_END;
  const socketHost = kind === 'postgres' && u.searchParams.has('host');
  if (!u.hostname && !socketHost) return `no host (expected ${kind === 'postgres' ? 'postgres://user:password@host:5432/database' : 'redis://:password@host:6379'})`;
  if (u.port !== '' && Number(u.port) === 0) return 'port 0: expected 1-65535';
  for (const [part, value] of [
    ['user name', u.username],
    ['password', u.password],
    [kind === 'postgres' ? 'database name' : 'path', u.pathname],
  ] as const) {
    try {
      decodeURIComponent(value);
    } catch {
      return `the ${part} has a bad percent-encoding (a % must be followed by two hex digits; write a literal % as %25)`;
    }
  }
  if (kind === 'redis' && u.pathname.length > 1 && !/^\/\d{1,2}$/.test(u.pathname)) return 'the path must be a database number such as /0';
  return null;
}

/**
 * Checks an outgoing http(s) URL (a webhook, a provider's base URL, an S3 endpoint) the way fetch
 * and the AWS SDK will read it: it parses, is http or https, names a host, keeps its port within
 * 1-65535, and its userinfo and path decode. Like `serverUrlProblem`, the message never echoes the
 * URL. Returns the problem, or null.
 */
export function httpUrlProblem(url: string): string | null {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return unparsedProblem(url);
  }
  if (u.hash.includes('@')) return EARLY_END; // an @ in an http path is its own (`/users/@me`)
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return `expected an http:// or https:// URL, got ${u.protocol.slice(0, 16)}//`;
  if (!u.hostname) return 'no host (expected http(s)://host[:port]/…)';
  if (u.port !== '' && Number(u.port) === 0) return 'port 0: expected 1-65535';
  for (const [part, value] of [
    ['user name', u.username],
    ['password', u.password],
    ['path', u.pathname],
  ] as const) {
    try {
      decodeURIComponent(value);
    } catch {
      return `the ${part} has a bad percent-encoding (a % must be followed by two hex digits; write a literal % as %25)`;
    }
  }
  return null;
}

/** A raw `#` or `/` in the userinfo ends the host part early, so an `@` shows after it: said without quoting the URL. */
export const EARLY_END = 'an @ after the host: a # or / written raw in the user name or password ends the host part before it; percent-encode them (%23, %2F)';

/** Why the WHATWG parser refused a URL, said without quoting it (the userinfo may hold a password). */
function unparsedProblem(url: string): string {
  const authority = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/([^/?#]*)/.exec(url)?.[1];
  if (authority !== undefined) {
    const hostPort = authority.slice(authority.lastIndexOf('@') + 1);
    const port = /:(\d*)$/.exec(hostPort)?.[1];
    const host = port === undefined ? hostPort : hostPort.slice(0, -(port.length + 1));
    if (!host) return 'no host (expected http(s)://host[:port]/…)';
    if (port !== undefined && port !== '' && Number(port) > 65535) return `port ${port} is outside 1-65535`;
    if (/\s/.test(host)) return 'the host contains a space';
  }
  return 'not a valid URL (check the host and port, and characters such as spaces, @ or # in it: percent-encode them)';
}

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

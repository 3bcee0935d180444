/**
 * The one URL redaction used everywhere a URL may reach a log, an error, an API view or
 * `config check --print`. It goes through the WHATWG URL parser, so it sees the URL the way the
 * clients that use it do: the credentials end at the LAST `@` of the authority
 * (`user:pa@ss@host` has the password `pa@ss`), a lone user name is a credential too
 * (`http://TOKEN@host`), and query parameters that carry secrets are masked.
 */
const MASK = '***';
/**
 * Query parameter names whose values are secrets (compared lower-case, `-` read as `_`): these, and
 * any name ending in `_` and one of the secret words (`sentinel_password`, `proxy_password`, `x_api_key`).
 */
const SECRET_PARAMS = new Set([
  'password',
  'pass',
  'passwd',
  'pwd',
  'token',
  'access_token',
  'refresh_token',
  'id_token',
  'secret',
  'client_secret',
  'key',
  'api_key',
  'apikey',
  'auth',
  'authorization',
  'sslpassword',
  'signature',
  'sig',
]);

const SECRET_SUFFIX = /_(password|passwd|pass|pwd|token|secret|key|apikey|auth|signature)$/;

function isSecretParam(name: string): boolean {
  const n = name.toLowerCase().replace(/-/g, '_');
  return SECRET_PARAMS.has(n) || SECRET_SUFFIX.test(n);
}

/**
 * A URL whose credentials the parser cannot be trusted to have found: it refused the URL, or an `@`
 * shows after where it ended the authority (a `#` or `/` written raw in the password ends it
 * early: `u:p@ss#word@host` reads as host `ss`). Everything from `//` to the last `@` is masked,
 * and the query.
 */
function maskToLastAt(url: string): string {
  const start = url.indexOf('//');
  const at = url.lastIndexOf('@');
  const masked = start >= 0 && at > start ? `${url.slice(0, start + 2)}${MASK}${url.slice(at)}` : url;
  return masked.replace(/\?.*$/, `?${MASK}`);
}

export function redactUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return maskToLastAt(url);
  }
  // An http(s) path may hold an @ of its own (`/users/@me`); a server URL's path is a database name.
  if (u.hash.includes('@') || (!u.protocol.startsWith('http') && u.pathname.includes('@'))) return maskToLastAt(url);
  if (u.password) u.password = MASK;
  else if (u.username) u.username = MASK;
  if (u.search) {
    const params = new URLSearchParams(u.search);
    let changed = false;
    for (const name of [...new Set(params.keys())]) {
      if (isSecretParam(name)) {
        params.set(name, MASK);
        changed = true;
      }
    }
    if (changed) u.search = params.toString().replace(/%2A/g, '*');
  }
  return u.toString();
}

/** The secret parts of a URL as they may appear in a client's error text (raw and percent-decoded). */
function secretsOf(url: string): string[] {
  const out = new Set<string>([url]);
  const add = (v: string) => {
    if (v.length >= 3) {
      out.add(v);
      try {
        out.add(decodeURIComponent(v));
      } catch {
        /* keep the raw form */
      }
    }
  };
  try {
    const u = new URL(url);
    if (u.password) add(u.password);
    else if (u.username) add(u.username);
    for (const [name, value] of new URLSearchParams(u.search)) if (isSecretParam(name)) add(value);
  } catch {
    // A URL the parser refuses (every multi-host redis+sentinel:// one): the userinfo up to the last
    // @, its password, and the secret query parameters, found as redactUrl's fallback finds them.
    const start = url.indexOf('//');
    const at = url.lastIndexOf('@');
    if (start >= 0 && at > start) {
      const userinfo = url.slice(start + 2, at);
      add(userinfo);
      if (userinfo.includes(':')) add(userinfo.slice(userinfo.indexOf(':') + 1));
    }
    for (const [, name, value] of url.matchAll(/[?&]([^=&#]+)=([^&#]*)/g)) if (isSecretParam(name!)) add(value!);
  }
  return [...out].sort((a, b) => b.length - a.length);
}

/** A client's error text (a connection failure) with the URL and its secrets masked. */
export function scrubUrlSecrets(text: string, url: string): string {
  let t = text;
  const safe = redactUrl(url);
  for (const s of secretsOf(url)) t = t.split(s).join(s === url ? safe : MASK);
  return t;
}

/** True when the URL carries credentials in its authority (`user:pass@` or `user@`), as the WHATWG parser (and fetch) read it. */
export function hasUserinfo(url: string): boolean {
  try {
    const u = new URL(url);
    return u.username !== '' || u.password !== '';
  } catch {
    return /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*@/i.test(url);
  }
}

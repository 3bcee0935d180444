/**
 * The one URL redaction used everywhere a URL may reach a log, an error, an API view or
 * `config check --print`. It goes through the WHATWG URL parser, so it sees the URL the way the
 * clients that use it do: the credentials end at the LAST `@` of the authority
 * (`user:pa@ss@host` has the password `pa@ss`), a lone user name is a credential too
 * (`http://TOKEN@host`), and query parameters that carry secrets are masked.
 */
const MASK = '***';
/** Query parameter names whose values are secrets (compared lower-case, `-` read as `_`). */
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

export function redactUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    // Not a URL the parser accepts: mask the whole authority's user part and any query, keep the rest readable.
    return url.replace(/\/\/[^/?#]*@/, `//${MASK}@`).replace(/\?.*$/, `?${MASK}`);
  }
  if (u.password) u.password = MASK;
  else if (u.username) u.username = MASK;
  if (u.search) {
    const params = new URLSearchParams(u.search);
    let changed = false;
    for (const name of [...new Set(params.keys())]) {
      if (SECRET_PARAMS.has(name.toLowerCase().replace(/-/g, '_'))) {
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
  try {
    const u = new URL(url);
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
    if (u.password) add(u.password);
    else if (u.username) add(u.username);
    for (const [name, value] of new URLSearchParams(u.search)) if (SECRET_PARAMS.has(name.toLowerCase().replace(/-/g, '_'))) add(value);
  } catch {
    const m = /\/\/([^/?#]*)@/.exec(url);
    if (m?.[1]) out.add(m[1]);
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

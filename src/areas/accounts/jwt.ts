/**
 * Reads the `exp` claim of a JWT access token without verifying it: we only need to know when
 * the provider will stop accepting it. Anything that is not a well-formed JWT with a numeric
 * `exp` gives null, never an exception.
 */
export function jwtExpiry(token: string): Date | null {
  const parts = token.split('.');
  if (parts.length !== 3 || !parts[1]) return null;
  try {
    const payload = JSON.parse(Buffer.from(parts[1], 'base64url').toString('utf8')) as unknown;
    if (typeof payload !== 'object' || payload === null) return null;
    const exp = (payload as { exp?: unknown }).exp;
    if (typeof exp !== 'number' || !Number.isFinite(exp) || exp <= 0 || exp > 1e11) return null;
    return new Date(exp * 1000);
  } catch {
    return null;
  }
}

/**
 * When a token stops working: `expires_in` (seconds from now) when the provider gave one and it
 * is sane, else the JWT's `exp`, else null (unknown: refreshed only on 401 or on request).
 */
export function tokenExpiry(accessToken: string, expiresIn: unknown, nowMs: number): Date | null {
  if (typeof expiresIn === 'number' && Number.isFinite(expiresIn) && expiresIn > 0 && expiresIn < 366 * 86_400) {
    return new Date(nowMs + Math.round(expiresIn * 1000));
  }
  return jwtExpiry(accessToken);
}

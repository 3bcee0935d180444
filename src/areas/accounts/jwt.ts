/**
 * Reads the `exp` claim of a JWT access token without verifying it: we only need to know when
 * the provider will stop accepting it. Anything that is not a well-formed JWT with a numeric
 * `exp` gives null, never an exception.
 */
export function jwtExpiry(token: string): Date | null {
  const exp = jwtClaims(token)?.exp;
  if (typeof exp !== 'number' || !Number.isFinite(exp) || exp <= 0 || exp > 1e11) return null;
  return new Date(exp * 1000);
}

/** The payload of a JWT, unverified (an id token's e-mail, the ChatGPT account id); null when it is not one. */
export function jwtClaims(token: string | null | undefined): Record<string, unknown> | null {
  const parts = (token ?? '').split('.');
  if (parts.length !== 3 || !parts[1]) return null;
  try {
    const payload = JSON.parse(Buffer.from(parts[1], 'base64url').toString('utf8')) as unknown;
    return typeof payload === 'object' && payload !== null && !Array.isArray(payload) ? (payload as Record<string, unknown>) : null;
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

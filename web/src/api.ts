// Every call the console makes is an ordinary /api/v1 call: the session rides in the HttpOnly cookie,
// and state-changing calls carry the CSRF token the server derived from it (readable cookie, header back).

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function csrf(): string {
  const m = /(?:^|;\s*)relay_console_csrf=([^;]+)/.exec(document.cookie);
  return m ? decodeURIComponent(m[1]!) : '';
}

let onUnauthorized: () => void = () => undefined;
export function whenSignedOut(f: () => void): void {
  onUnauthorized = f;
}

export async function api<T = any>(path: string, init: { method?: string; body?: unknown; headers?: Record<string, string> } = {}): Promise<T> {
  const method = init.method ?? 'GET';
  const headers: Record<string, string> = { ...(init.headers ?? {}) };
  if (method !== 'GET') headers['x-csrf-token'] = csrf();
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`/api/v1${path}`, { method, headers, body: init.body === undefined ? undefined : JSON.stringify(init.body), credentials: 'same-origin' });
  if (res.status === 204) return undefined as T;
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    if (res.status === 401 && !headers.authorization) onUnauthorized();
    throw new ApiError(res.status, data?.error?.message ?? `HTTP ${res.status}`);
  }
  return data as T;
}

export async function signIn(token: string): Promise<void> {
  await api('/sessions', { method: 'POST', body: { cookie: true }, headers: { authorization: `Bearer ${token}` } });
}

export async function signOut(): Promise<void> {
  await api('/sessions/current', { method: 'DELETE' });
}

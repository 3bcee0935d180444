// Shared by the provider-fakes-*.test.ts files (one a provider): a POST that reads the reply as text
// and as JSON where it parses, an event-stream parser, and a JWT's claims.

export const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
export const JSON_CT = { 'content-type': 'application/json' };

export async function post(url: string, body: string | object, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; text: string; json: any }> {
  const res = await fetch(url, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: parseOrNull(text) };
}

function parseOrNull(text: string): any {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** Parses an event stream by its blank-line framing, as a client must (not by the chunks it arrived in). */
export function events(text: string): Array<{ event: string | null; data: any }> {
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) => {
      const lines = block.split('\n');
      const event = lines.find((l) => l.startsWith('event: '))?.slice(7) ?? null;
      const data = lines
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice(6))
        .join('\n');
      return { event, data: JSON.parse(data) };
    });
}

export function jwtClaims(token: string): any {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8'));
}

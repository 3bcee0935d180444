import type { z } from 'zod';
import { isStorableText } from '../store/poison-split.js';
import { InvalidInput, type FieldError } from '../errors/app-error.js';

export { isStorableText };
export type { FieldError } from '../errors/app-error.js';

/** Parses a body (or a query) with `schema`; an absent body counts as `{}`, a JSON `null` does not. */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown, prefix = ''): z.infer<S> {
  const r = schema.safeParse(body === undefined ? {} : body);
  if (r.success) return r.data;
  throw new InvalidInput(
    r.error.issues.map((i) => {
      const path = [prefix, ...i.path.map(String)].filter(Boolean).join('.');
      if (i.code === 'unrecognized_keys') return { field: [path, ...i.keys].filter(Boolean).join('.'), message: `unknown field${i.keys.length > 1 ? 's' : ''} ${i.keys.join(', ')}` };
      return { field: path || '(body)', message: i.message };
    }),
  );
}

/** Route ids are positive integers; anything else is simply not found. */
export function parseId(raw: string): number | null {
  if (!/^[1-9][0-9]{0,15}$/.test(raw)) return null;
  const n = Number(raw);
  return Number.isSafeInteger(n) ? n : null;
}

/** Deeper JSON than this is refused: no API here takes more than a few levels, and deep input overflows recursive walkers (hashing, serialising). */
export const MAX_JSON_DEPTH = 32;

/** A key as it appears in a field path: printable even when the key itself is the poison. */
function keyLabel(k: string): string {
  return isStorableText(k)
    ? k
    : JSON.stringify(k)
        .slice(1, -1)
        .replace(/[\ud800-\udfff]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
}

/**
 * Every problem PostgreSQL (or a recursive walker) would have with a parsed JSON value: text
 * with NUL or a lone surrogate, in values or in keys, and nesting deeper than MAX_JSON_DEPTH.
 * Iterative, so hostile depth cannot overflow the stack here either. At most `limit` problems.
 */
export function unstorableFields(value: unknown, root = '', limit = 20): FieldError[] {
  const out: FieldError[] = [];
  const stack: Array<{ v: unknown; path: string; depth: number }> = [{ v: value, path: root, depth: 0 }];
  while (stack.length && out.length < limit) {
    const { v, path, depth } = stack.pop()!;
    if (typeof v === 'string') {
      if (!isStorableText(v)) out.push({ field: path || '(body)', message: 'text contains a NUL character or an unpaired UTF-16 surrogate, which cannot be stored' });
      continue;
    }
    if (typeof v !== 'object' || v === null) continue;
    if (depth >= MAX_JSON_DEPTH) {
      out.push({ field: path || '(body)', message: `nested deeper than ${MAX_JSON_DEPTH} levels` });
      continue;
    }
    const at = (k: string) => (path ? `${path}.${k}` : k);
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ v: v[i], path: at(String(i)), depth: depth + 1 });
      continue;
    }
    for (const k of Object.keys(v).reverse()) {
      if (!isStorableText(k)) out.push({ field: at(keyLabel(k)), message: 'field name contains a NUL character or an unpaired UTF-16 surrogate' });
      else stack.push({ v: (v as Record<string, unknown>)[k], path: at(k), depth: depth + 1 });
    }
  }
  return out;
}

/** Throws a 400 naming the fields when `value` holds text PostgreSQL cannot store (see unstorableFields). */
export function assertStorable(value: unknown, root = ''): void {
  const problems = unstorableFields(value, root);
  if (problems.length) throw new InvalidInput(problems);
}

/** What a JSON value is, for an error message: `null`, `an array`, `a string`, `a number`, … */
function jsonKind(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return `a ${typeof v}`;
}

/**
 * Issue 51: a request body, when there is one, is a JSON object (or an array on a route that
 * declares one: `config: { arrayBody: true }`; none does today). `null`, `[]`, `"x"`, `1` or a
 * text/plain body is a 400 naming `body`, before any handler sees it, so no route can read a
 * missing field of a non-object as "not given" (`POST /sessions` with `null` once minted a token).
 */
export function assertBodyShape(body: unknown, arrayAllowed = false): void {
  if (body === undefined) return;
  if (typeof body === 'object' && body !== null && (!Array.isArray(body) || arrayAllowed)) return;
  const expected = arrayAllowed ? 'a JSON object or array' : 'a JSON object';
  throw new InvalidInput([{ field: 'body', message: `expected ${expected}, got ${jsonKind(body)}` }]);
}

/**
 * A route that declares no body takes none: an object with fields is a 400 naming them, never
 * ignored (a reset sent `{"amount": 5}` must not reset everything while the caller thinks it reset
 * part). No body, or `{}` (what many clients send on every POST), passes.
 */
export function assertNoBody(body: unknown): void {
  if (body === undefined || body === null || typeof body !== 'object') return; // assertBodyShape judged the rest
  const fields = Object.keys(body);
  if (!fields.length) return;
  // Field names are echoed only when they look like names (a pasted token used as a key is not).
  const named = fields.filter((f) => /^[A-Za-z_][A-Za-z0-9_.-]{0,39}$/.test(f)).slice(0, 5);
  const got = named.length ? `${named.join(', ')}${fields.length > named.length ? ` and ${fields.length - named.length} more` : ''}` : `${fields.length} field${fields.length > 1 ? 's' : ''}`;
  throw new InvalidInput([{ field: 'body', message: `this route takes no body (got ${got})` }]);
}

/**
 * Query parameters that are numbers wherever they appear, with the range every route accepts
 * (a route narrows it further in its own schema: `limit` is at most 500 on some lists).
 */
export const NUMERIC_QUERY: Readonly<Record<string, { min: number; max: number }>> = {
  limit: { min: 1, max: 10_000 },
  after: { min: 0, max: Number.MAX_SAFE_INTEGER },
  after_id: { min: 0, max: Number.MAX_SAFE_INTEGER },
  cursor: { min: 0, max: Number.MAX_SAFE_INTEGER },
  offset: { min: 0, max: Number.MAX_SAFE_INTEGER },
};

/**
 * Issue 51: the numeric query parameters of every route are whole numbers in range before any
 * handler (or SQL) sees them: `after_id=1e400`, `limit=-5`, `limit=abc`, a repeated `limit` are a
 * 400 naming `query.<name>`, never an `Infinity` or `NaN` that a route would clamp or send on.
 */
export function assertNumericQuery(query: unknown): void {
  if (!query || typeof query !== 'object') return;
  const problems: FieldError[] = [];
  for (const [name, range] of Object.entries(NUMERIC_QUERY)) {
    const raw = (query as Record<string, unknown>)[name];
    if (raw === undefined) continue;
    const field = `query.${name}`;
    if (typeof raw !== 'string') {
      problems.push({ field, message: 'expected one value' });
      continue;
    }
    const n = /^[0-9]{1,16}$/.test(raw) ? Number(raw) : NaN;
    if (!Number.isSafeInteger(n) || n < range.min || n > range.max) {
      problems.push({ field, message: `expected a whole number from ${range.min} to ${range.max}, got ${JSON.stringify(raw.slice(0, 40))}` });
    }
  }
  if (problems.length) throw new InvalidInput(problems);
}

import type { z } from 'zod';

/**
 * zod's messages in the words of a config file: "expected true or false, got "maybe"" rather
 * than "Invalid input: expected boolean, received string". Passed to each `safeParse` of
 * configuration (never installed globally: a library user's own zod schemas keep zod's words).
 * A message written on a schema itself (`.regex(re, 'expected …')`) still wins.
 */
export const configErrorMap: z.core.$ZodErrorMap = (iss) => {
  const got = shown(iss.input);
  switch (iss.code) {
    case 'invalid_type':
      return `expected ${TYPE_WORDS[iss.expected] ?? iss.expected}${got}`;
    case 'invalid_value':
      return iss.values.length === 1 ? `expected ${JSON.stringify(iss.values[0])}${got}` : `expected one of ${iss.values.map((v) => JSON.stringify(v)).join(', ')}${got}`;
    case 'too_small':
      return bound('at least', 'greater than', iss.origin, iss.minimum, iss.inclusive) + got;
    case 'too_big':
      return bound('at most', 'less than', iss.origin, iss.maximum, iss.inclusive) + got;
    case 'invalid_format':
      return `expected ${FORMAT_WORDS[iss.format] ?? `a value in the ${iss.format} format`}${got}`;
    case 'not_multiple_of':
      return `expected a multiple of ${String(iss.divisor)}${got}`;
    case 'unrecognized_keys':
      return 'unknown key';
    case 'invalid_union':
      return `expected a different kind of value${got}`;
    default:
      return undefined;
  }
};

const TYPE_WORDS: Record<string, string> = {
  boolean: 'true or false',
  number: 'a number',
  int: 'a whole number',
  string: 'text',
  object: 'a mapping of keys (a section)',
  array: 'a list',
  record: 'a mapping of keys',
  bigint: 'a whole number',
  date: 'a date',
};

const FORMAT_WORDS: Record<string, string> = {
  url: 'a URL such as https://example.com',
  email: 'an email address',
  regex: 'text of the documented form',
};

const SIZE_UNITS: Record<string, string> = { string: 'characters', array: 'items', set: 'items', file: 'bytes' };

function bound(inclusiveWord: string, exclusiveWord: string, origin: string, limit: unknown, inclusive?: boolean): string {
  const n = typeof limit === 'bigint' ? limit.toString() : String(limit);
  const unit = SIZE_UNITS[origin];
  if (unit) return `expected ${inclusiveWord} ${n} ${n === '1' ? unit.replace(/s$/, '') : unit}`;
  return `expected a number ${inclusive === false ? `${exclusiveWord} ${n}` : `${inclusiveWord === 'at least' ? '≥' : '≤'} ${n}`}`;
}

/** `, got "maybe"` for the value that failed; nothing when the value is lost (a failed number coercion) or too long to help. */
function shown(input: unknown): string {
  if (input === undefined) return ', got nothing';
  if (input === null || (typeof input === 'number' && Number.isNaN(input))) return '';
  if (Array.isArray(input)) return input.length ? `, got a list of ${input.length}` : ', got an empty list';
  if (typeof input === 'object') return ', got a mapping';
  const text = JSON.stringify(input);
  return text.length > 60 ? '' : `, got ${text}`;
}

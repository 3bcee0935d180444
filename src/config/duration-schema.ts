import { z } from 'zod';
import { DURATION_FORM, parseDuration } from './duration.js';

/**
 * The duration schemas every section uses (backup's included). A key is a duration when its
 * schema is one of these or a refinement of one (`duration.refine(...)` keeps the same pipe),
 * so `config check --print` writes every duration back as `60s`, never as milliseconds.
 */
export const duration = z.union([z.string(), z.number()]).transform((value, ctx) => {
  const ms = parseDuration(value);
  if (ms === null) {
    ctx.addIssue({ code: 'custom', message: `expected ${DURATION_FORM}, got ${JSON.stringify(value)}` });
    return z.NEVER;
  }
  return ms;
});
export const positiveDuration = duration.refine((ms) => ms > 0, { message: 'expected a duration greater than zero' });

/** A refinement clones the pipe but keeps its input and transform: compare those, not the object. */
export function isDurationSchema(s: z.ZodType): boolean {
  return s instanceof z.ZodPipe && s.def.in === duration.def.in && s.def.out === duration.def.out;
}

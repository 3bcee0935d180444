import { z } from 'zod';
import { DURATION_FORM, formatDuration, parseDuration } from './duration.js';

/**
 * The longest duration any key takes: ten years. Past it a schedule's next slot, a retention
 * cut-off or a timeline window leaves the range a date can hold (a period of 1e20 s made every
 * job view answer 500), and no setting of a job runtime means more.
 */
export const MAX_DURATION_MS = 3650 * 86_400_000;

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
  if (ms > MAX_DURATION_MS) {
    ctx.addIssue({ code: 'custom', message: `expected at most ${formatDuration(MAX_DURATION_MS)} (ten years), got ${JSON.stringify(value)}` });
    return z.NEVER;
  }
  return ms;
});
export const positiveDuration = duration.refine((ms) => ms > 0, { message: 'expected a duration greater than zero' });

/** A refinement clones the pipe but keeps its input and transform: compare those, not the object. */
export function isDurationSchema(s: z.ZodType): boolean {
  return s instanceof z.ZodPipe && s.def.in === duration.def.in && s.def.out === duration.def.out;
}

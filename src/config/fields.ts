import { z } from 'zod';
import { httpUrlProblem, serverUrlProblem } from './server-url.js';
import { hasUserinfo } from './redact-url.js';
import { isKnownTimeZone } from '../time/zones.js';

export { duration, positiveDuration } from './duration-schema.js';

/** A day in milliseconds, for retention defaults. */
export const DAY = 86_400_000;

/** A number, also from text that is one ("8080" in a quoted YAML value); other text stays text, so errors show it. */
export const numeric = <T extends z.ZodType>(schema: T) => z.preprocess((v) => (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v)) ? Number(v) : v), schema);
export const port = numeric(z.number().int().min(0).max(65535));
export const positiveInt = numeric(z.number().int().positive());

/**
 * Every outgoing http(s) URL key (webhooks, providers' base URLs, S3 endpoints; `providerUrl` builds
 * on it): checked as fetch will read it (server-url.ts: http or https, a host, port 1-65535,
 * percent-encoding), so `config check` refuses what the first request would fail on.
 */
export const httpUrl = z.string().superRefine((url, ctx) => {
  const problem = httpUrlProblem(url);
  if (problem) ctx.addIssue({ code: 'custom', message: problem, abort: true });
});

/**
 * An outgoing provider URL: credentials in it (`user:pass@`) are refused, naming the key that
 * takes them instead. fetch refuses such a URL and quotes it whole in its error text, which then
 * reaches logs and stored rows; a key in its own field is sealed and sent as a header.
 */
export const providerUrl = (pattern: RegExp, expected: string, instead: string) =>
  httpUrl.regex(pattern, expected).refine((u) => !hasUserinfo(u), `must not carry credentials (user:pass@host): put the secret in ${instead} instead`);

/**
 * A secret that is still the example's placeholder (`CHANGE-ME…` in deploy/kubernetes/secret.example.yaml)
 * is refused where the config loads: applied as shipped, the example's admin token was long enough
 * to pass and anyone who read the repository could sign in.
 */
export const notPlaceholder = (s: string) => !/change-me/i.test(s);
export const PLACEHOLDER_MESSAGE = 'is still the example placeholder (it contains CHANGE-ME): generate a real secret, e.g. `openssl rand -base64 32`';

/** A PostgreSQL URL (DATABASE_URL, DATABASE_DIRECT_URL, sql.database_url), checked as the driver will read it (server-url.ts). */
export const postgresUrl = z
  .string()
  .regex(/^postgres(ql)?:\/\//, 'expected a postgres:// or postgresql:// URL')
  .superRefine((url, ctx) => {
    const problem = serverUrlProblem(url, 'postgres');
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });

/** Where an S3 bucket is (`backup.s3`, `image.s3`): one shape, credentials only from the usual AWS variables or a role. */
export const s3Fields = {
  bucket: z.string().regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'expected an S3 bucket name (3-63 characters a-z, 0-9, . -)'),
  prefix: z
    .string()
    .regex(/^[A-Za-z0-9._/-]*$/, 'expected letters, digits, . _ / -')
    .default(''),
  region: z.string().min(1).default('us-east-1'),
  endpoint: httpUrl.optional(),
  force_path_style: z.boolean().default(false),
};

/** An IANA time zone Node knows (`UTC`, `Asia/Shanghai`); a name it does not know is refused here, not at the first round that uses it. */
export const timeZone = z.string().refine(isKnownTimeZone, { message: 'unknown time zone; expected an IANA name such as UTC or Asia/Shanghai' });

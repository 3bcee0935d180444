import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { SchedulerSnapshotServices } from './wiring.js';
import type { SchedulerAccounts } from './scheduler-snapshot-service.js';
import { json, route } from '../../http/contract.js';

const querySchema = z
  .object({
    platform: z
      .string({ error: (iss) => (iss.input === undefined ? 'required: the platform whose schedulable accounts to list' : 'expected one value') })
      .regex(/^[a-z0-9_-]{1,32}$/, 'expected a platform name of 1-32 characters a-z, 0-9, _ or -')
      .meta({ description: 'the platform whose schedulable accounts to list' }),
    group: z
      .string({ error: 'expected one value' })
      .regex(/^[A-Za-z0-9_.:-]{0,64}$/, 'expected a group name of at most 64 characters A-Z, a-z, 0-9, _ . : or -')
      .optional()
      .meta({ description: "the scheduling group; absent or empty is the platform's ungrouped bucket" }),
  })
  .strict();

const time = z.iso.datetime({ offset: true });

/** One schedulable account, as the gateway routes to it. */
const RoutingEntry = z
  .object({
    id: z.number().int(),
    platform: z.string(),
    group: z.string().nullable(),
    priority: z.number(),
    concurrency: z.number().int(),
    proxy_id: z.number().int().nullable(),
    status: z.string(),
    temp_unschedulable_until: time.nullable().meta({ description: 'set by an upstream 429 until its reset; such an account is left out until then' }),
    token_expires_at: time.nullable(),
  })
  .meta({ id: 'RoutingEntry' });

const SchedulerAccounts = z
  .object({
    platform: z.string(),
    group: z.string(),
    source: z.enum(['snapshot', 'postgres']).meta({ description: '`snapshot` when served from the snapshot, `postgres` when the snapshot missed' }),
    epoch: z.number().int().meta({
      description:
        "rises when the bucket's content changes; never below an epoch the same replica answered before, nor below one any replica answered snapshot.read_max_age (100 ms) or more before this request arrived, whichever the source or rebuild (except on a replica that cannot read PostgreSQL: then only its own)",
    }),
    age_seconds: z.number().meta({ description: 'seconds since the bucket was last written or rebuilt; 0 for a PostgreSQL answer' }),
    accounts: z.array(RoutingEntry).meta({ description: 'in routing order' }),
    count: z.number().int(),
  })
  .meta({ id: 'SchedulerAccounts' });

/**
 * `GET /api/v1/scheduler/accounts?platform=&group=`: the schedulable accounts of a bucket in
 * routing order, from the snapshot (or PostgreSQL when it misses), with its epoch and age.
 * An unknown platform or group is an empty list; a malformed query is a 400 naming the parameter.
 */
export function registerSchedulerRoutes(api: FastifyInstance, deps: Pick<RouteDeps<SchedulerSnapshotServices>, 'services'>): void {
  route(
    api,
    {
      method: 'GET',
      path: '/scheduler/accounts',
      operationId: 'listSchedulableAccounts',
      summary: 'The schedulable accounts of a bucket, in routing order',
      description: 'From the scheduler snapshot, or PostgreSQL when it misses. An unknown platform or group is an empty list.',
      tag: 'scheduler',
      query: querySchema,
      responses: { 200: json(SchedulerAccounts) },
    },
    async ({ query }, _req, reply) => {
      const answer = await deps.services.schedulerSnapshot.accounts(query.platform, query.group ?? '');
      return reply.type('application/json; charset=utf-8').send(answerJson(answer));
    },
  );
}

/** The JSON of a served list, made once per list: a snapshot answer serves one array until its bucket or a cooldown changes. */
const listJson = new WeakMap<SchedulerAccounts['accounts'], string>();

/**
 * The route's body, the same bytes `JSON.stringify({ ...answer, count })` gives, with the list's
 * JSON reused: on the hot path the list is most of the bytes and most of the serialising time
 * (about 10 µs of about 30 for a bucket of 20).
 */
export function answerJson(a: SchedulerAccounts): string {
  let list = listJson.get(a.accounts);
  if (list === undefined) listJson.set(a.accounts, (list = JSON.stringify(a.accounts)));
  const s = JSON.stringify;
  return `{"platform":${s(a.platform)},"group":${s(a.group)},"source":${s(a.source)},"epoch":${s(a.epoch)},"age_seconds":${s(a.age_seconds)},"accounts":${list},"count":${a.accounts.length}}`;
}

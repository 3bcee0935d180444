import type { RedisClient } from '../../../coordination/redis-client.js';
import type { KeySpace } from '../../../coordination/keys.js';
import type { ChangeEvent } from './change-events.js';

/** The stream's key, under the prefix and environment like every other key (`<prefix>:<env>:changes`). */
export function changeStreamKey(ks: KeySpace): string {
  return `${ks.prefix}:${ks.env}:changes`;
}

/** One stream entry's field/value pairs (docs/change-stream.md, "The event"): flat strings, `fields` and `changed` as JSON. */
export function entryOf(e: ChangeEvent): string[] {
  const out = ['event_id', e.event_id, 'type', e.type, 'entity', e.entity, 'id', e.id, 'at', e.at, 'fields', JSON.stringify(e.fields)];
  if (e.changed) out.push('changed', JSON.stringify(e.changed));
  return out;
}

/**
 * The Redis Stream a gateway follows with XREAD. One XADD per event, pipelined, each trimming the
 * stream to about `maxLen` entries (`MAXLEN ~`: whole macro nodes, cheap). Throws if any XADD
 * failed, so the publisher does not mark the batch published (it is sent again: at least once).
 */
export class RedisChangeStream {
  readonly key: string;

  constructor(
    private readonly redis: RedisClient,
    ks: KeySpace,
    private readonly maxLen: number,
  ) {
    this.key = changeStreamKey(ks);
  }

  async add(events: ChangeEvent[]): Promise<void> {
    if (!events.length) return;
    const p = this.redis.pipeline();
    for (const e of events) p.xadd(this.key, 'MAXLEN', '~', this.maxLen, '*', ...entryOf(e));
    const results = (await p.exec()) ?? [];
    const failed = results.find(([err]) => err);
    if (failed || results.length !== events.length) throw failed?.[0] ?? new Error('change stream XADD pipeline answered short');
  }
}

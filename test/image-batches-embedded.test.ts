import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { captureLogs } from './helpers/log-capture.js';
import { TERMINAL } from '../src/areas/images/store/image-batches.js';
import { FakeImageProvider } from './fixtures/image-provider.js';
import { freePort } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { waitFor } from './helpers/wait.js';

/** The same queue, money steps and state machine in embedded mode (PGlite, no servers), driven by the real worker loop. */
describe('image batches in embedded mode', () => {
  let rt: Runtime;
  let fake: FakeImageProvider;
  const logs = captureLogs('emb', 'warn');

  beforeAll(async () => {
    fake = await FakeImageProvider.start({ pItemFails: 0.3 });
    const config = loadConfig({
      env: {
        RELAY_JOBS_DATA_DIR: embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-images-embedded-'))),
        RELAY_JOBS_HTTP_PORT: String(await freePort()),
        RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: fake.url,
        RELAY_JOBS__IMAGE__PRICES__IMG: '5',
        RELAY_JOBS__IMAGE__POLL_INTERVAL: '20ms',
        RELAY_JOBS__IMAGE__CLAIM_INTERVAL: '20ms',
      },
    });
    rt = await Runtime.create(config, { logger: logs.logger });
    rt.start();
  }, 60_000);
  afterAll(async () => {
    await rt.shutdown();
    await fake.stop();
  });

  it('holds, drives and captures a batch through PGlite', async () => {
    const { rows } = await rt.db.query(`INSERT INTO billing_users (email, balance) VALUES ('e@test', 100) RETURNING id`);
    const user = Number(rows[0]!.id);
    const s = rt.services.imageBatches;
    const r = await s.submit('emb-1', { user_id: user, model: 'img', prompts: ['a', 'b', 'c', 'd'], size: '1024x1024', n: 2 });
    expect(r.batch.hold_amount).toBe(40);
    // Bounded like the loop it replaces (400 x 25 ms); on the limit the assertion below says where it stopped.
    const b = await waitFor(
      async () => {
        const cur = (await s.batches.get(r.batch.id))!;
        return TERMINAL.includes(cur.state) ? cur : null;
      },
      { what: 'the batch in a final state', intervalMs: 25, timeoutMs: 10_000 },
    ).catch(async () => (await s.batches.get(r.batch.id))!);
    expect(b.state, logs.text() + JSON.stringify(await s.batches.events(b.id))).toBe('completed');
    expect(b.captured).toBe(b.succeeded * 5);
    const u = (await rt.db.query(`SELECT balance, frozen_balance FROM billing_users WHERE id = $1`, [user])).rows[0]!;
    expect({ balance: Number(u.balance), frozen: Number(u.frozen_balance) }).toEqual({ balance: 100 - b.captured, frozen: 0 });
    expect(fake.createsByOurId.get(String(b.id))).toBe(1);
  });
});

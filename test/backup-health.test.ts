import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backupJob } from '../src/areas/backup/backup.js';
import { resolveJobSettings } from '../src/config/job-settings.js';
import type { Services } from '../src/index.js';
import { backupEnv } from './helpers/backup-env.js';

const HOUR = 3_600_000;

/** The backup job's own health rule: late when no good backup is younger than 1.5× its cadence (real PostgreSQL, a real pg_dump). */
describe('backup health', () => {
  let env: Awaited<ReturnType<typeof backupEnv>>;
  beforeAll(async () => {
    env = await backupEnv({ verify: false });
  });
  afterAll(async () => env.cleanup());

  const settings = resolveJobSettings('backup', { enabled: true, every: HOUR, timeout: 60_000 }, {});
  const judge = (createdAt: Date | null, nowMs: number) => backupJob.health!({ backup: env.service } as Pick<Services, 'backup'>, { settings, createdAt, nowMs });

  it('is late once 1.5× the cadence has passed with no good backup, counted from the job first being scheduled', async () => {
    const now = Date.now();
    expect(await judge(new Date(now - HOUR), now)).toBeNull();
    const late = await judge(new Date(now - 2 * HOUR), now);
    expect(late).toMatchObject({ health: 'late' });
    expect(late!.reason).toMatch(/no good backup yet, 2h after the job was first scheduled \(limit 90m\)/);
  });

  it('a completed backup makes it not late until that backup is older than 1.5× the cadence', async () => {
    const rec = await (await env.service.start('manual')).done;
    expect(rec.state).toBe('completed');
    const finished = Date.parse(String(rec.finished_at));
    expect(await judge(new Date(finished - 10 * HOUR), finished + HOUR)).toBeNull();
    const late = await judge(new Date(finished - 10 * HOUR), finished + 2 * HOUR);
    expect(late!.reason).toMatch(/the newest good backup is 2h old, over 1\.5× the cadence \(90m\)/);
  });
});

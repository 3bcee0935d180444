/**
 * Backup and restore of a database with N usage rows: relay-jobs (pg_dump -Fc -Z0 → node gzip →
 * SHA-256 → directory; restore: checksum pass, then gunzip → pg_restore --single-transaction)
 * against the same tools run by hand in the same run (`pg_dump -Fc -Z0 | gzip -6 > file`,
 * `gunzip -c file | pg_restore --single-transaction`). Peak RSS is this process's, sampled
 * every 20 ms while relay-jobs works; the hand-run tools' memory is theirs, not Node's.
 */
import { execSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { UsageStore, utcDayStart } from '../src/areas/usage/store/usage.js';
import { Backups } from '../src/areas/backup/store/backups.js';
import { BackupService } from '../src/areas/backup/backup-service.js';
import { PgDumper } from '../src/areas/backup/dumper.js';
import { Verifier } from '../src/areas/backup/verifier.js';
import { restore } from '../src/areas/backup/restore.js';
import { FsStorage, fileSource } from '../src/areas/backup/backup-storage.js';
import { BackupMetrics } from '../src/areas/backup/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { freshDatabase } from '../test/helpers/services.js';

export interface BackupBench {
  rows: number;
  dumpBytes: number;
  handDumpS: number;
  relayDumpS: number;
  verifyS: number;
  handRestoreS: number;
  relayRestoreS: number;
  baseRssMiB: number;
  peakDumpRssMiB: number;
  peakRestoreRssMiB: number;
}

async function timed<T>(fn: () => Promise<T>): Promise<{ s: number; peakMiB: number; value: T }> {
  let peak = process.memoryUsage.rss();
  const t = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 20);
  const start = performance.now();
  try {
    const value = await fn();
    return { s: (performance.now() - start) / 1000, peakMiB: Math.max(peak, process.memoryUsage.rss()) / 2 ** 20, value };
  } finally {
    clearInterval(t);
  }
}

export async function benchBackup(rows: number): Promise<BackupBench> {
  const src = await freshDatabase();
  const targets = [await freshDatabase(), await freshDatabase()];
  const db = await PgDb.connect({ url: src.url, poolSize: 4, connectTimeoutMs: 5000 });
  const dir = mkdtempSync(join(tmpdir(), 'rj-bench-backup-'));
  try {
    await migrate(db);
    const days = 7;
    const today = utcDayStart(Date.now());
    await new UsageStore(db).ensurePartitions(Array.from({ length: days }, (_, i) => today - i * 86_400_000));
    await db.query(
      `INSERT INTO usage_logs (request_id, user_id, account_id, platform, model, input_tokens, output_tokens, cost, latency_ms, status_code, created_at)
       SELECT 'req-' || g, 'user-' || (g % 5000), 'acct-' || (g % 300), (ARRAY['anthropic','openai','gemini'])[1 + g % 3], 'model-' || (g % 12),
              (g * 7919) % 100000, (g * 104729) % 8000, ((g % 9973) / 1000.0)::numeric, g % 30000, 200, $2::timestamptz - make_interval(secs => (g % ($3 * 86400))::double precision)
         FROM generate_series(1::bigint, $1::bigint) g`,
      [rows, new Date(today + 86_399_000).toISOString(), days],
    );
    await db.query('VACUUM ANALYZE');
    const baseRssMiB = process.memoryUsage.rss() / 2 ** 20;

    const handFile = join(dir, 'hand.dump.gz');
    const hand = await timed(async () => execSync(`pg_dump --format=custom --compress=0 --dbname='${src.url}' | gzip -6 > '${handFile}'`, { shell: '/bin/bash' }));

    const storage = new FsStorage(dir);
    const make = (verifier: Verifier | null) =>
      new BackupService({
        backups: new Backups(db),
        storage,
        dumper: new PgDumper({ db, url: src.url, level: 6 }),
        verifier,
        clock: systemClock,
        log: silentLogger(),
        metrics: new BackupMetrics(new Registry()),
        instanceId: 'bench',
        env: 'bench',
        dbName: src.name,
        compression: 'gzip',
        leaseMs: 30_000,
        keepLast: 100,
      });
    const dump = await timed(async () => (await make(null).start('manual')).done);
    if (dump.value.state !== 'completed') throw new Error(`bench backup ${dump.value.state}: ${dump.value.error}`);
    const verifier = new Verifier({ db, url: src.url, storage, connectTimeoutMs: 5000 });
    const verify = await timed(() => verifier.verify({ id: 'bench', key: dump.value.object_key, sha256: dump.value.sha256!, counts: dump.value.table_counts! }, new AbortController().signal));
    if (verify.value) throw new Error(`bench verification failed: ${verify.value}`);

    const handRestore = await timed(async () =>
      execSync(`gunzip -c '${handFile}' | pg_restore --no-owner --no-privileges --single-transaction --exit-on-error --dbname='${targets[0]!.url}'`, { shell: '/bin/bash' }),
    );
    const file = fileSource(dump.value.location);
    const relayRestore = await timed(() =>
      restore({
        source: { storage: file, key: file.key, label: 'bench', format: 'pg_dump', sha256: dump.value.sha256, counts: dump.value.table_counts, close: () => undefined },
        target: targets[1]!.url,
        force: false,
        livenessMs: 15_000,
        connectTimeoutMs: 5000,
        out: () => undefined,
      }),
    );
    return {
      rows,
      dumpBytes: statSync(dump.value.location).size,
      handDumpS: hand.s,
      relayDumpS: dump.s,
      verifyS: verify.s,
      handRestoreS: handRestore.s,
      relayRestoreS: relayRestore.s,
      baseRssMiB,
      peakDumpRssMiB: dump.peakMiB,
      peakRestoreRssMiB: relayRestore.peakMiB,
    };
  } finally {
    await db.close();
    rmSync(dir, { recursive: true, force: true });
    for (const t of targets) await t.drop();
    await src.drop();
  }
}

export function printBackup(results: BackupBench[]): void {
  console.log('\n## Backup and restore (usage_logs rows; directory storage)\n');
  console.log(
    '| rows | dump MB | pg_dump \\| gzip by hand s | relay-jobs backup s | ratio | verify (restore into scratch + counts) s | gunzip \\| pg_restore by hand s | relay-jobs restore s (checksum pass + restore) | ratio | RSS before MiB | peak RSS backup MiB | peak RSS restore MiB |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of results) {
    console.log(
      `| ${r.rows} | ${(r.dumpBytes / 2 ** 20).toFixed(1)} | ${r.handDumpS.toFixed(2)} | ${r.relayDumpS.toFixed(2)} | ${(r.relayDumpS / r.handDumpS).toFixed(2)}x | ${r.verifyS.toFixed(2)} | ${r.handRestoreS.toFixed(2)} | ${r.relayRestoreS.toFixed(2)} | ${(r.relayRestoreS / r.handRestoreS).toFixed(2)}x | ${r.baseRssMiB.toFixed(0)} | ${r.peakDumpRssMiB.toFixed(0)} | ${r.peakRestoreRssMiB.toFixed(0)} |`,
    );
  }
}

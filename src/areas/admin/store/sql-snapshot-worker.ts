import { parentPort, workerData } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';

/**
 * The embedded SQL console's thread (sql-snapshot.ts starts it). It opens a PGlite of its own on
 * a copy of the service's data directory (`workerData.dir`), and runs one statement per message. PGlite runs a statement synchronously and its `statement_timeout` never fires (its
 * timers are JavaScript timers on a thread the statement holds), so nothing here bounds a
 * statement: the owner terminates this whole thread at the deadline. That is why it owns a copy:
 * terminating it can lose nothing and cannot touch the live data directory.
 */
export interface SnapshotRequest {
  id: number;
  kind: 'query' | 'explain' | 'show';
  text: string;
  maxRows: number;
  timeoutMs: number;
}

export type SnapshotReply =
  { type: 'ready' } | { type: 'failed'; message: string } | { id: number; ok: true; rows: Array<Record<string, unknown>> } | { id: number; ok: false; message: string; code?: string };

const CURSOR = 'relay_jobs_sql_console';
const port = parentPort!;
const { dir } = workerData as { dir: string };

function open(): Promise<PGlite> {
  return PGlite.create(dir);
}

async function run(pg: PGlite, req: SnapshotRequest): Promise<Array<Record<string, unknown>>> {
  const ms = Math.max(1, Math.round(req.timeoutMs));
  return pg.transaction(async (tx) => {
    // Kept though they cannot fire in PGlite: if a later PGlite honours them, they cut first.
    await tx.query('SET TRANSACTION READ ONLY');
    await tx.query(`SET LOCAL statement_timeout = ${ms}`);
    await tx.query(`SET LOCAL lock_timeout = ${ms}`);
    try {
      if (req.kind !== 'query') return (await tx.query<Record<string, unknown>>(req.text)).rows;
      await tx.query(`DECLARE ${CURSOR} NO SCROLL CURSOR FOR ${req.text}`);
      return (await tx.query<Record<string, unknown>>(`FETCH FORWARD ${req.maxRows + 1} FROM ${CURSOR}`)).rows;
    } finally {
      // Nothing a statement did to the snapshot outlives it either.
      await tx.rollback();
    }
  });
}

const ready = open();
ready.then(
  () => port.postMessage({ type: 'ready' } satisfies SnapshotReply),
  (err: Error) => port.postMessage({ type: 'failed', message: err.message } satisfies SnapshotReply),
);

port.on('message', (req: SnapshotRequest) => {
  void ready
    .then((pg) => run(pg, req))
    .then(
      (rows) => port.postMessage({ id: req.id, ok: true, rows } satisfies SnapshotReply),
      (err: Error & { code?: string }) => port.postMessage({ id: req.id, ok: false, message: err.message, code: err.code } satisfies SnapshotReply),
    );
});

// @ts-check
// Plain JavaScript, type-checked through JSDoc (tsconfig `checkJs`): the thread loads this very
// file whether relay-jobs runs built or from source (vitest, tsx), with no TypeScript loader to
// register in every new thread.
import { parentPort, workerData } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';

/**
 * The embedded SQL console's thread (sql-snapshot.ts starts it). It opens a PGlite of its own on
 * a copy of the service's data directory (`workerData.dir`), and runs one statement per message. PGlite runs a statement synchronously and its `statement_timeout` never fires (its
 * timers are JavaScript timers on a thread the statement holds), so nothing here bounds a
 * statement: the owner terminates this whole thread at the deadline. That is why it owns a copy:
 * terminating it can lose nothing and cannot touch the live data directory.
 *
 * @typedef {{ id: number; kind: 'query' | 'explain' | 'show'; text: string; maxRows: number; timeoutMs: number }} SnapshotRequest
 * @typedef {{ type: 'ready' } | { type: 'failed'; message: string } | { id: number; ok: true; rows: Array<Record<string, unknown>> } | { id: number; ok: false; message: string; code?: string }} SnapshotReply
 * @typedef {Array<Record<string, unknown>>} Rows
 */

const CURSOR = 'relay_jobs_sql_console';
const port = /** @type {import('node:worker_threads').MessagePort} */ (parentPort);
const { dir, pgSettings } = /** @type {{ dir: string; pgSettings: string[] }} */ (workerData);

/** @param {PGlite} pg @param {SnapshotRequest} req @returns {Promise<Rows>} */
async function run(pg, req) {
  const ms = Math.max(1, Math.round(req.timeoutMs));
  return pg.transaction(async (tx) => {
    // Kept though they cannot fire in PGlite: if a later PGlite honours them, they cut first.
    await tx.query('SET TRANSACTION READ ONLY');
    await tx.query(`SET LOCAL statement_timeout = ${ms}`);
    await tx.query(`SET LOCAL lock_timeout = ${ms}`);
    try {
      if (req.kind !== 'query') return (await tx.query(req.text)).rows;
      await tx.query(`DECLARE ${CURSOR} NO SCROLL CURSOR FOR ${req.text}`);
      return (await tx.query(`FETCH FORWARD ${req.maxRows + 1} FROM ${CURSOR}`)).rows;
    } finally {
      // Nothing a statement did to the snapshot outlives it either.
      await tx.rollback();
    }
  });
}

/** @param {SnapshotReply} reply */
const reply = (reply) => port.postMessage(reply);

const ready = PGlite.create(dir, { startParams: [...PGlite.defaultStartParams, ...pgSettings] });
ready.then(
  () => reply({ type: 'ready' }),
  (/** @type {Error} */ err) => reply({ type: 'failed', message: err.message }),
);

port.on('message', (/** @type {SnapshotRequest} */ req) => {
  void ready
    .then((pg) => run(pg, req))
    .then(
      (rows) => reply({ id: req.id, ok: true, rows }),
      (/** @type {Error & { code?: string }} */ err) => reply({ id: req.id, ok: false, message: err.message, code: err.code }),
    );
});

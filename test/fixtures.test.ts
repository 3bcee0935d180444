import { describe, expect, it } from 'vitest';
import { once } from 'node:events';
import { connect } from 'node:net';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { FakePaymentProvider } from './fixtures/payment-provider.js';
import { serverEndOf } from './fixtures/socket-errors.js';
import { nextTurn, waitFor } from './helpers/wait.js';

/** A client killed mid-request: half a body, then a TCP reset (what a SIGKILLed replica leaves behind). */
async function resetMidRequest(port: number, path: string): Promise<void> {
  const s = connect(port, '127.0.0.1');
  await once(s, 'connect');
  const half = `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"half":`;
  s.write(half);
  // The server's HTTP parser runs in the read that brought the bytes, so once its end has read all
  // of them the request handler has the half request: the reset then lands mid-request.
  const end = await waitFor(
    () => {
      const e = serverEndOf(s);
      return e && e.bytesRead >= Buffer.byteLength(half) && e;
    },
    { what: `the server on port ${port} to read the half request`, intervalMs: 5 },
  );
  // Listened to before the reset, after the HTTP server's own 'close' listener (it aborts the
  // request). Not events.once: that rejects on the 'error' (read ECONNRESET) the reset brings first.
  const closed = new Promise<void>((r) => end.once('close', () => r()));
  s.resetAndDestroy();
  await closed;
  // What the abort sets off (the request's 'error', the handler's rejection) runs on later ticks.
  await nextTurn();
}

describe('fixture servers survive clients that die mid-request', () => {
  it('the OAuth and payment fixtures take a reset without an unhandled error, then keep serving', async () => {
    const errors: unknown[] = [];
    const onError = (e: unknown) => errors.push(e);
    process.on('uncaughtException', onError);
    process.on('unhandledRejection', onError);
    const oauth = await FakeOAuthServer.start();
    const pay = await FakePaymentProvider.start();
    try {
      await resetMidRequest(oauth.port, '/token');
      await resetMidRequest(Number(new URL(pay.url).port), '/orders/x/close');
      expect(errors).toEqual([]);
      expect((await fetch(`${pay.url}/orders/unknown`)).status).toBeGreaterThanOrEqual(200);
      expect((await fetch(`http://127.0.0.1:${oauth.port}/token`, { method: 'POST', body: 'grant_type=refresh_token' })).status).toBeGreaterThanOrEqual(200);
    } finally {
      process.off('uncaughtException', onError);
      process.off('unhandledRejection', onError);
      await oauth.close();
      await pay.close();
    }
  });
});

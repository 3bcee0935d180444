import { describe, expect, it } from 'vitest';
import { connect } from 'node:net';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { FakePaymentProvider } from './fixtures/payment-provider.js';
import { holdFor, quietFor } from './helpers/wait.js';

/** A client killed mid-request: half a body, then a TCP reset (what a SIGKILLed replica leaves behind). */
async function resetMidRequest(port: number, path: string): Promise<void> {
  const s = connect(port, '127.0.0.1');
  await new Promise<void>((r) => s.once('connect', () => r()));
  s.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"half":`);
  await holdFor(100, 'the half body reaches the server before the reset (a socket gives no signal that the peer has read it)');
  s.resetAndDestroy();
  await quietFor(200, 'the server takes the reset: a crash from it would happen within this time');
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

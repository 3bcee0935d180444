import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { listenOnLoopback } from '../fixtures/socket-errors.js';

/**
 * A loopback front for a provider's token endpoint (point `oauth.providers.<platform>.token_url`
 * at `tokenUrl`). Every request is forwarded to the provider fake at once, so the provider
 * processes it (a rotating one rotates the refresh token); while the gate holds, the provider's
 * reply is kept from the client. A replica SIGKILLed then dies exactly as in soak finding 3:
 * after the provider rotated, before the rotated tokens reached the store. `pass()` lets replies
 * through (held ones are written if their client is still there; a dead one's are dropped).
 */
export class ReplyGate {
  /** Requests the provider has answered and the gate holds. */
  held = 0;
  private holding = true;
  private readonly waiting: Array<() => void> = [];
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly target: string,
    private readonly server: ReturnType<typeof createServer>,
  ) {}

  /** A gate in front of `target` (the fake's token URL), holding from the start. */
  static async start(target: string): Promise<ReplyGate> {
    let self!: ReplyGate;
    const server = createServer((req, res) => void self.forward(req, res).catch(() => res.destroy()));
    self = new ReplyGate(target, server);
    await listenOnLoopback(server, self.sockets);
    return self;
  }

  get tokenUrl(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/token`;
  }

  /** Replies go through from now on, the held ones first. */
  pass(): void {
    this.holding = false;
    for (const go of this.waiting.splice(0)) go();
  }

  async close(): Promise<void> {
    this.pass();
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private async forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const headers: Record<string, string> = {};
    for (const h of ['content-type', 'accept', 'user-agent']) if (typeof req.headers[h] === 'string') headers[h] = req.headers[h];
    const upstream = await fetch(this.target, { method: req.method, headers, body: req.method === 'GET' ? undefined : Buffer.concat(chunks) });
    const body = await upstream.text();
    if (this.holding) {
      this.held++;
      await new Promise<void>((r) => this.waiting.push(r));
    }
    if (res.destroyed || req.socket.destroyed) return; // the client died meanwhile: the reply is lost with it
    const out: Record<string, string> = {};
    for (const h of ['content-type', 'retry-after']) {
      const v = upstream.headers.get(h);
      if (v !== null) out[h] = v;
    }
    res.writeHead(upstream.status, out);
    res.end(body);
  }
}

import { createHmac } from 'node:crypto';
import type { Transporter } from 'nodemailer';
import { systemClock } from '../../time/clock.js';
import { failureText } from '../../upstream/error-text.js';
import { JSON_REPLY_LIMIT, readReplyText } from '../../upstream/reply-limit.js';

export interface OutgoingMessage {
  to: string;
  subject: string;
  text: string;
  /** An HTML alternative (mail only; the webhook carries the text). */
  html?: string;
  /** Stable per delivery intent, so a message resent after a crash carries the same id. */
  messageId: string;
  dedupKey: string;
}

export interface Channel {
  readonly name: 'email' | 'webhook';
  send(msg: OutgoingMessage): Promise<void>;
  close(): void;
}

/**
 * A send that failed, with a scrubbed message and deliberately no `cause`: the original error
 * quotes the URL (and its credentials), and a logger serialises causes.
 */
export class DeliveryFailed extends Error {
  override name = 'DeliveryFailed';
}

export class SmtpChannel implements Channel {
  readonly name = 'email' as const;
  /** Made at the first send: nodemailer (about 400 KB of code) is loaded only by a replica that mails. */
  private transport: Promise<Transporter> | undefined;
  private closed = false;

  constructor(
    private readonly c: { host: string; port: number; secure: boolean; user?: string; pass?: string; from: string },
    private readonly timeoutMs: number,
  ) {}

  private async open(): Promise<Transporter> {
    const { default: nodemailer } = await import('nodemailer');
    const { c, timeoutMs } = this;
    // Pooled: one SMTP session carries many messages instead of a handshake per message.
    const transport = nodemailer.createTransport({
      pool: true,
      maxConnections: 2,
      host: c.host,
      port: c.port,
      secure: c.secure,
      auth: c.user ? { user: c.user, pass: c.pass } : undefined,
      connectionTimeout: timeoutMs,
      greetingTimeout: timeoutMs,
      socketTimeout: timeoutMs,
      tls: { rejectUnauthorized: false },
      ignoreTLS: !c.secure,
    });
    // Closed while loading: the transport opens nothing until a send, and none will come.
    if (this.closed) transport.close();
    return transport;
  }

  async send(m: OutgoingMessage): Promise<void> {
    try {
      const transport = await (this.transport ??= this.open());
      await transport.sendMail({ from: this.c.from, to: m.to, subject: m.subject, text: m.text, html: m.html, messageId: m.messageId, headers: { 'X-Relay-Jobs-Key': m.dedupKey } });
    } catch (err) {
      const pass = this.c.pass;
      const text = (err as Error).message ?? String(err);
      throw new DeliveryFailed((pass && pass.length >= 3 ? text.split(pass).join('***') : text).slice(0, 500));
    }
  }

  close(): void {
    this.closed = true;
    void this.transport?.then((t) => t.close()).catch(() => undefined);
  }
}

export class WebhookChannel implements Channel {
  readonly name = 'webhook' as const;

  constructor(
    private readonly c: { url: string; secret?: string },
    private readonly timeoutMs: number,
  ) {}

  async send(m: OutgoingMessage): Promise<void> {
    const body = JSON.stringify({ key: m.dedupKey, to: m.to, subject: m.subject, text: m.text });
    const ts = String(Math.floor(systemClock.now() / 1000));
    let res: Response;
    try {
      res = await fetch(this.c.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'idempotency-key': m.dedupKey,
          ...(this.c.secret ? { 'x-timestamp': ts, 'x-signature': createHmac('sha256', this.c.secret).update(`${ts}.${body}`).digest('hex') } : {}),
        },
        body,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (err) {
      // fetch's error text quotes the URL (with any user:pass@ or ?token=): only the scrubbed text leaves here.
      throw new DeliveryFailed(`webhook unreachable: ${failureText(err, [this.c.url], 300)}`);
    }
    // The reply is not used, but is read (capped) so the connection can be reused and a huge one cannot pile up.
    await readReplyText(res, JSON_REPLY_LIMIT, 'webhook reply').catch(() => undefined);
    if (!res.ok) throw new Error(`webhook answered HTTP ${res.status}`);
  }

  close(): void {}
}

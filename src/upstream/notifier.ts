import { createHmac } from 'node:crypto';
import nodemailer from 'nodemailer';
import { systemClock } from '../time/clock.js';

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

export class SmtpChannel implements Channel {
  readonly name = 'email' as const;
  private readonly transport;

  constructor(
    private readonly c: { host: string; port: number; secure: boolean; user?: string; pass?: string; from: string },
    timeoutMs: number,
  ) {
    // Pooled: one SMTP session carries many messages instead of a handshake per message.
    this.transport = nodemailer.createTransport({
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
  }

  async send(m: OutgoingMessage): Promise<void> {
    await this.transport.sendMail({ from: this.c.from, to: m.to, subject: m.subject, text: m.text, html: m.html, messageId: m.messageId, headers: { 'X-Relay-Jobs-Key': m.dedupKey } });
  }

  close(): void {
    this.transport.close();
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
    const res = await fetch(this.c.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'idempotency-key': m.dedupKey,
        ...(this.c.secret ? { 'x-timestamp': ts, 'x-signature': createHmac('sha256', this.c.secret).update(`${ts}.${body}`).digest('hex') } : {}),
      },
      body,
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    if (!res.ok) throw new Error(`webhook answered HTTP ${res.status}`);
  }

  close(): void {}
}

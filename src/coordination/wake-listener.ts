import type { Db } from '../store/db.js';
import type { Logger } from '../telemetry/logger.js';
import type { WakeHub } from '../workers/wake-hub.js';
import type { LivenessSession } from './liveness.js';

/** The channel the migration 026 triggers notify; the payload is the topic. */
export const WAKE_CHANNEL = 'relay_jobs_wake';
/**
 * Wake-ups that carry a detail, `<topic>:<detail>` (the token cache's `tokens:<account id>` and
 * pings). A channel of their own because replicas of versions before it count every payload on
 * WAKE_CHANNEL as a metric label: during a rolling deploy one series per account would pile up on
 * them. One listener session gets both channels' notifications in commit order (one queue).
 */
export const WAKE_DETAIL_CHANNEL = 'relay_jobs_wake_detail';
const CHANNELS = [WAKE_CHANNEL, WAKE_DETAIL_CHANNEL];

export interface WakeCounter {
  inc(labels: { channel: string }): void;
}

/**
 * The replica's one LISTEN. In cluster mode it rides on the liveness session (no extra
 * connection; that session is on `DATABASE_DIRECT_URL` when set, so a transaction pooler never
 * sits between LISTEN and its notifications): every session the liveness opens LISTENs again
 * and wakes every loop (notifications sent while it was down are gone, so each loop looks once).
 * When the session is lost the hub is told, and loops fall back to their own poll intervals
 * until a new session listens. In embedded mode PGlite's in-process LISTEN does the same.
 */
export class WakeListener {
  private unlisten: (() => Promise<void>) | null = null;
  private readonly unsubscribe: Array<() => void> = [];

  constructor(
    private readonly hub: WakeHub,
    private readonly log: Logger,
    private readonly counter?: WakeCounter,
  ) {}

  private deliver(payload: string): void {
    // `<topic>:<detail>` (the token cache's `tokens:<account id>`): counted and routed by its topic alone.
    const i = payload.indexOf(':');
    const topic = i < 0 ? payload : payload.slice(0, i);
    this.counter?.inc({ channel: topic });
    this.hub.emit(topic, i < 0 ? undefined : payload.slice(i + 1));
  }

  /** Cluster mode: LISTEN on each liveness session as it opens. */
  onLiveness(liveness: LivenessSession): void {
    if (!this.hub.enabled) return;
    this.unsubscribe.push(
      liveness.onOpened(async (conn) => {
        conn.onNotification?.((channel, payload) => {
          if (CHANNELS.includes(channel)) this.deliver(payload);
        });
        for (const c of CHANNELS) await conn.query(`LISTEN ${c}`);
        this.log.info({ channels: CHANNELS }, 'wake-up listener on the liveness session');
        this.hub.setListening(true);
      }),
      liveness.onLost(() => {
        this.log.warn('wake-up listener lost with the liveness session: loops poll at their own intervals until it is back');
        this.hub.setListening(false);
      }),
    );
  }

  /** Embedded mode: PGlite's in-process LISTEN. */
  async onEmbedded(db: Db): Promise<void> {
    if (!this.hub.enabled || !db.listen) return;
    const listen = db.listen.bind(db);
    const offs = await Promise.all(CHANNELS.map((c) => listen(c, (payload) => this.deliver(payload))));
    this.unlisten = async () => {
      await Promise.all(offs.map((off) => off()));
    };
    this.hub.setListening(true);
  }

  async stop(): Promise<void> {
    for (const u of this.unsubscribe.splice(0)) u();
    const un = this.unlisten;
    this.unlisten = null;
    await un?.().catch(() => undefined);
  }
}

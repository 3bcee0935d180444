// The console's one server-push stream (GET /api/v1/events, Server-Sent Events): opened after
// sign-in, closed on sign-out. Pages subscribe to its events instead of polling on a timer; only
// while the stream is down do they fall back to polling.

export type LiveEvent = 'rounds' | 'instances' | 'hello';
type Listener = (event: LiveEvent, data: any) => void;

let source: EventSource | null = null;
let connected = false;
const listeners = new Set<Listener>();
const stateListeners = new Set<(up: boolean) => void>();

function setConnected(up: boolean): void {
  if (connected === up) return;
  connected = up;
  for (const f of stateListeners) f(up);
}

export function openLive(): void {
  if (source) return;
  source = new EventSource('/api/v1/events');
  source.onopen = () => setConnected(true);
  source.onerror = () => setConnected(false);
  for (const name of ['hello', 'rounds', 'instances'] as const) {
    source.addEventListener(name, (e) => {
      setConnected(true);
      const data = JSON.parse((e as MessageEvent).data);
      for (const f of listeners) f(name, data);
    });
  }
  // The server says why it ended the stream; a shutdown or a replaced stream reconnects by itself.
  source.addEventListener('bye', () => setConnected(false));
}

export function closeLive(): void {
  source?.close();
  source = null;
  setConnected(false);
}

export function isLive(): boolean {
  return connected;
}

export function onLive(f: Listener): () => void {
  listeners.add(f);
  return () => listeners.delete(f);
}

export function onLiveState(f: (up: boolean) => void): () => void {
  stateListeners.add(f);
  return () => stateListeners.delete(f);
}

/** One server-sent event: its `event:` name (empty when none) and its `data:` lines joined. */
export interface SseEvent {
  event: string;
  data: string;
}

/** Splits an SSE body (as read, possibly cut at the cap) into events; a last event without its blank line still counts. */
export function parseSse(text: string): SseEvent[] {
  const events: SseEvent[] = [];
  for (const block of text.replace(/\r\n?/g, '\n').split('\n\n')) {
    let event = '';
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (event || data.length) events.push({ event, data: data.join('\n') });
  }
  return events;
}

/** Each event's data as a JSON object (events whose data is not one are skipped: `[DONE]`, keep-alives). */
export function sseJson(text: string): Array<{ event: string; json: Record<string, unknown> }> {
  const out: Array<{ event: string; json: Record<string, unknown> }> = [];
  for (const e of parseSse(text)) {
    try {
      const v = JSON.parse(e.data) as unknown;
      if (v && typeof v === 'object' && !Array.isArray(v)) out.push({ event: e.event, json: v as Record<string, unknown> });
    } catch {
      /* not JSON: skipped */
    }
  }
  return out;
}

/**
 * The bound of issue 53: after a refresh commits, no replica answers the old token more than 100 ms
 * later. Every replica is polled without pause (two token requests in flight per replica) while
 * refreshes are forced through the admin API, each on the next replica in turn. A refresh's commit
 * time is its `refresh.last_success_at` (`clock_timestamp()` in the committing statement, just
 * before the commit: PostgreSQL runs on this machine, so its clock is the bench's). Per refresh,
 * the staleness is how long after that commit a request was still *sent* that got an older token
 * version back (0 when none): what the bound is about, a request arriving after the commit. Its
 * arrival after the commit is given too; it adds the answer's transit and this process's own lag.
 */
import type { Rig } from './hotpath.js';

export interface Staleness {
  refreshes: number;
  answers: number;
  oldAnswersAfterCommit: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** The same, by when the old answer arrived. */
  arrivedP99Ms: number;
  arrivedMaxMs: number;
  /** Commit → the last of the three replicas answered the new version. */
  newP50Ms: number;
  newP99Ms: number;
  newMaxMs: number;
}

interface Answer {
  replica: number;
  version: number;
  sent: number;
  at: number;
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil(p * s.length) - 1)] ?? NaN;
};

export async function measureStaleness(rig: Rig): Promise<Staleness> {
  const refreshes = Number(process.env.BENCH_HOTPATH_REFRESHES ?? 200);
  const answers: Answer[] = [];
  let stop = false;
  const poll = async (replica: number) => {
    while (!stop) {
      const sent = Date.now();
      const res = await fetch(`http://127.0.0.1:${rig.ports[replica]}/api/v1/accounts/${rig.accountId}/token`, { method: 'POST', headers: { authorization: 'Bearer bench-admin-token-0123456789' } });
      const body = (await res.json()) as { token_version?: number };
      const at = Date.now();
      if (!res.ok || typeof body.token_version !== 'number') throw new Error(`hotpath staleness: replica ${replica} answered ${res.status} ${JSON.stringify(body)}`);
      answers.push({ replica, version: body.token_version, sent, at });
    }
  };
  const pollers = rig.ports.flatMap((_, i) => [poll(i), poll(i)]);
  const commits: Array<{ version: number; at: number }> = [];
  const newLatency: number[] = [];
  try {
    for (let k = 0; k < refreshes; k++) {
      const from = answers.length;
      const r = (await rig.api(k % rig.ports.length, `/accounts/${rig.accountId}/refresh`, {})) as { result: string; account: { token_version: number; refresh: { last_success_at: string } } };
      if (r.result !== 'refreshed') throw new Error(`hotpath staleness: refresh ${k} came back ${JSON.stringify(r)}`);
      const c = { version: r.account.token_version, at: Date.parse(r.account.refresh.last_success_at) };
      commits.push(c);
      // Until every replica has answered the new version (or a newer one).
      const deadline = Date.now() + 10_000;
      for (;;) {
        const first = rig.ports.map((_, i) => answers.slice(from).find((a) => a.replica === i && a.version >= c.version && a.at >= c.at)?.at);
        if (first.every((t) => t !== undefined)) {
          newLatency.push(Math.max(...(first as number[])) - c.at);
          break;
        }
        if (Date.now() > deadline) throw new Error(`hotpath staleness: a replica still answered an older version than ${c.version} 10 s after the refresh`);
        await new Promise((res) => setTimeout(res, 5));
      }
      await new Promise((res) => setTimeout(res, 20 + ((k * 37) % 40)));
    }
  } finally {
    stop = true;
    await Promise.allSettled(pollers);
  }
  const stale: number[] = [];
  const arrived: number[] = [];
  let old = 0;
  for (const c of commits) {
    let worst = 0;
    let worstArrived = 0;
    for (const a of answers)
      if (a.version < c.version && a.at > c.at) {
        old++;
        worst = Math.max(worst, a.sent - c.at);
        worstArrived = Math.max(worstArrived, a.at - c.at);
      }
    stale.push(worst);
    arrived.push(worstArrived);
  }
  return {
    refreshes: commits.length,
    answers: answers.length,
    oldAnswersAfterCommit: old,
    p50Ms: pct(stale, 0.5),
    p99Ms: pct(stale, 0.99),
    maxMs: Math.max(0, ...stale),
    arrivedP99Ms: pct(arrived, 0.99),
    arrivedMaxMs: Math.max(0, ...arrived),
    newP50Ms: pct(newLatency, 0.5),
    newP99Ms: pct(newLatency, 0.99),
    newMaxMs: Math.max(0, ...newLatency),
  };
}

import { ServerIngress } from '../src/http/connection-limits.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { tmpdir } from 'node:os';
import type { FastifyInstance } from 'fastify';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { loadConfig } from '../src/config/load.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { CONSOLE_DIST } from '../src/http/console-routes.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { JOBS } from '../src/jobs/registry.js';
import { freePort } from './helpers/services.js';

// The web console against a real embedded runtime on a loopback port, driven by Debian's chromium
// (never a downloaded browser). Needs web/dist: `node scripts/build.mjs` (npm ci runs it).
const TOKEN = 'console-admin-token-5f1c9a7e3b';
const MASTER_KEY = randomBytes(32).toString('base64');
const ARTIFACTS = join(process.cwd(), 'test-artifacts', 'console');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

async function until<T>(what: string, f: () => Promise<T | null | undefined | false>, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('web console (browser, embedded runtime)', () => {
  let rt: Runtime;
  let http: FastifyInstance;
  let base: string;
  let ctx: BrowserContext;
  let page: Page;
  let profile: string;
  const bearer = { authorization: `Bearer ${TOKEN}` };
  const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    const dir = mkdtempSync(join(tmpdir(), 'rj-console-'));
    const config = loadConfig({
      env: {
        RELAY_JOBS_DATA_DIR: dir,
        RELAY_JOBS_ADMIN_TOKEN: TOKEN,
        RELAY_JOBS_MASTER_KEY: MASTER_KEY,
        RELAY_JOBS__JOBS__CANARY__ENABLED: 'true',
        RELAY_JOBS__JOBS__CANARY__EVERY: '1h',
        RELAY_JOBS__JOBS__CANARY__SLEEP: '300ms',
        RELAY_JOBS__SHUTDOWN__GRACE: '2s',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    const port = await freePort();
    await http.listen({ port, host: '127.0.0.1' });
    base = `http://127.0.0.1:${port}`;
    rt.start(new ServerIngress(http));
    profile = mkdtempSync(join(tmpdir(), 'rj-chromium-'));
    ctx = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1400, height: 900 },
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    page = ctx.pages()[0] ?? (await ctx.newPage());
  }, 60_000);

  afterAll(async () => {
    await ctx?.close();
    await rt?.shutdown();
    if (profile) rmSync(profile, { recursive: true, force: true });
  });

  it('a wrong token shows an error and nothing else is reachable', async () => {
    await page.goto(`${base}/`);
    await page.getByLabel('Admin token').fill('not-the-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page
      .getByRole('alert')
      .filter({ hasText: /admin token is wrong/ })
      .waitFor();
    expect(await page.getByRole('link', { name: 'Jobs' }).count()).toBe(0);
    expect(await page.getByRole('table').count()).toBe(0);
    await shot('sign-in-error');
  });

  it('signs in; every job is in the Jobs table with its health', async () => {
    // By keyboard: type into the focused field, Enter submits.
    await page.getByLabel('Admin token').fill('');
    await page.getByLabel('Admin token').focus();
    await page.keyboard.type(TOKEN);
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await page.getByRole('table', { name: 'Instances' }).waitFor();
    await shot('overview');
    // A figure, not an assertion (the machine is shared): the overview's first paint and data after a reload.
    await page.reload();
    await page.getByRole('table', { name: 'Instances' }).waitFor();
    const timing = await page.evaluate(() => ({
      first_contentful_paint_ms: Math.round(performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? -1),
      instances_shown_ms: Math.round(performance.now()),
    }));
    writeFileSync(join(ARTIFACTS, 'timings.json'), JSON.stringify(timing, null, 2));
    // The session lives in cookies only: nothing in web storage.
    expect(await page.evaluate(() => localStorage.length + sessionStorage.length)).toBe(0);
    await page.getByRole('link', { name: 'Jobs' }).click();
    const table = page.getByRole('table', { name: 'Jobs' });
    await table.waitFor();
    const views = (await (await fetch(`${base}/api/v1/jobs`, { headers: bearer })).json()).jobs as { name: string; health: string }[];
    expect(views.map((v) => v.name)).toEqual(JOBS.map((j) => j.name));
    for (const v of views) {
      const row = table.getByRole('row').filter({ has: page.getByRole('link', { name: v.name, exact: true }) });
      await expect.poll(() => row.count()).toBe(1);
      await expect.poll(() => row.getByRole('cell').nth(3).innerText()).toMatch(/^(healthy|idle|late|stuck|failing|disabled)\b/);
    }
    const disabled = views.find((v) => v.health === 'disabled');
    if (disabled) {
      const button = table
        .getByRole('row')
        .filter({ has: page.getByRole('link', { name: disabled.name, exact: true }) })
        .getByRole('button', { name: 'Run now' });
      expect(await button.isDisabled()).toBe(true);
    }
    await shot('jobs');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot('jobs-dark');
    await page.emulateMedia({ colorScheme: 'light' });
  });

  it('Run now on canary shows the new round without a reload, and the job page lists it', async () => {
    const before = (await (await fetch(`${base}/api/v1/jobs/canary`, { headers: bearer })).json()).runs.length as number;
    const row = page
      .getByRole('table', { name: 'Jobs' })
      .getByRole('row')
      .filter({ has: page.getByRole('link', { name: 'canary', exact: true }) });
    await row.getByRole('button', { name: 'Run now' }).click();
    await row
      .getByRole('status')
      .filter({ hasText: /started run \d+/ })
      .waitFor();
    const runId = Number(/started run (\d+)/.exec(await row.getByRole('status').innerText())![1]);
    // The row's last run turns to this round by polling, no reload.
    await expect.poll(() => row.getByRole('cell').nth(4).innerText(), { timeout: 20_000 }).toMatch(/^ok\b/);
    await row.getByRole('link', { name: 'canary', exact: true }).click();
    await page.getByRole('heading', { name: 'Job canary' }).waitFor();
    const rounds = page.getByRole('table', { name: 'Recent rounds' });
    await rounds.getByRole('cell', { name: String(runId), exact: true }).waitFor();
    expect(await rounds.getByRole('row').count()).toBeGreaterThan(before);
    await page.getByRole('img', { name: /Round duration/ }).waitFor();
    await shot('job-canary');
  });

  it('shows a usage chart from data posted through the API, and a recompute with its progress', async () => {
    const at = new Date(Math.floor(Date.now() / 3_600_000) * 3_600_000 - 2 * 3_600_000 + 60_000).toISOString();
    const events = Array.from({ length: 5 }, (_, i) => ({
      request_id: `console-${i}`,
      user_id: 'u1',
      platform: 'openai',
      model: 'gpt-5',
      input_tokens: 10,
      output_tokens: 20,
      cost: '0.1',
      created_at: at,
    }));
    const posted = await fetch(`${base}/api/v1/usage`, { method: 'POST', headers: { ...bearer, 'content-type': 'application/json' }, body: JSON.stringify({ events }) });
    expect(posted.status).toBe(200);
    await page.getByRole('link', { name: 'Usage' }).click();
    await page.getByRole('heading', { name: 'Usage' }).waitFor();
    await page.getByRole('button', { name: 'Recompute this range' }).click();
    await page.getByRole('table', { name: 'Recompute tasks' }).waitFor();
    await until(
      'the rollups',
      async () => {
        const to = new Date(Date.now() + 3_600_000).toISOString();
        const from = new Date(Date.now() - 24 * 3_600_000).toISOString();
        const d = await (await fetch(`${base}/api/v1/dashboard/usage?from=${from}&to=${to}`, { headers: bearer })).json();
        return d.points?.length > 0;
      },
      30_000,
    );
    await page.getByRole('img', { name: /Usage: requests/ }).waitFor({ timeout: 20_000 });
    await shot('usage');
  });

  it('accounts and proxies: a table without secrets, disable from the row', async () => {
    const secret = 'sk-console-access-token-9d8c7b6a5f';
    const proxyPassword = 'proxy-password-71e2c3';
    const post = (path: string, body: unknown) => fetch(`${base}/api/v1${path}`, { method: 'POST', headers: { ...bearer, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const proxy = await post('/proxies', { name: 'egress-1', url: `http://user:${proxyPassword}@127.0.0.1:3128` });
    expect(proxy.status, await proxy.clone().text()).toBe(201);
    const acct = await post('/accounts', { platform: 'openai', name: 'console-acct', credentials: { access_token: secret, refresh_token: `${secret}-r` }, proxy_id: (await proxy.json()).id });
    expect(acct.status, await acct.clone().text()).toBe(201);
    await page.getByRole('link', { name: 'Accounts & proxies', exact: true }).click();
    const table = page.getByRole('table', { name: 'Accounts' });
    const row = table.getByRole('row').filter({ hasText: 'console-acct' });
    await row.waitFor();
    await page.getByRole('table', { name: 'Proxies' }).getByRole('cell', { name: 'egress-1' }).waitFor();
    const html = await page.content();
    expect(html).not.toContain(secret);
    expect(html).not.toContain(proxyPassword);
    await row.getByRole('button', { name: 'Disable' }).click();
    await row.getByText('disabled', { exact: true }).waitFor();
    await row.getByRole('button', { name: 'Enable' }).waitFor();
    await shot('accounts');
  });

  it('every other page loads without an error state', async () => {
    for (const [link, heading] of [
      ['Accounts & proxies', 'Accounts & proxies'],
      ['Billing & notifications', 'Billing & notifications'],
      ['Alerts', 'Alerts'],
      ['Image batches', 'Image batches'],
      ['Scheduler', 'Scheduler snapshot'],
      ['Monitors', 'Monitors'],
      ['Account tests', 'Account tests'],
      ['Backups', 'Backups'],
      ['Overview', 'Overview'],
    ] as const) {
      await page.getByRole('link', { name: link, exact: true }).click();
      await page.getByRole('heading', { name: heading, exact: true }).waitFor();
      await expect.poll(() => page.getByText('Loading…').count(), { timeout: 15_000 }).toBe(0);
      const errors = await page.locator('.error').allInnerTexts();
      expect(errors, link).toEqual([]);
      await shot(link.split(' ')[0]!.toLowerCase());
    }
  });

  it('the session cookie is HttpOnly and SameSite=Strict; a cross-site POST without the CSRF token is refused', async () => {
    const cookies = await ctx.cookies(base);
    const session = cookies.find((c) => c.name === 'relay_console_session')!;
    expect(session).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    expect(cookies.find((c) => c.name === 'relay_console_csrf')).toMatchObject({ httpOnly: false, sameSite: 'Strict' });
    expect(await page.evaluate(() => document.cookie)).not.toContain('relay_console_session');
    const cookie = `relay_console_session=${session.value}`;
    // A forged request carries the cookie (as a browser without SameSite would) but cannot know the token.
    const forged = await fetch(`${base}/api/v1/jobs/canary/run`, { method: 'POST', headers: { cookie, origin: 'https://evil.example' } });
    expect(forged.status).toBe(403);
    expect((await forged.json()).error.code).toBe('csrf_failed');
    const wrong = await fetch(`${base}/api/v1/jobs/canary/run`, { method: 'POST', headers: { cookie, 'x-csrf-token': 'guess' } });
    expect(wrong.status).toBe(403);
    // Reads with the cookie work; bearer calls never need the CSRF header.
    expect((await fetch(`${base}/api/v1/jobs`, { headers: { cookie } })).status).toBe(200);
    expect((await fetch(`${base}/api/v1/sessions`, { method: 'POST', headers: bearer })).status).toBe(201);
    // A real cross-site page (localhost is another site than 127.0.0.1) posting a form in the signed-in browser.
    const evil = createServer((_req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(`<form id="f" method="POST" enctype="text/plain" action="${base}/api/v1/jobs/canary/run"><input name="a" value="b"></form><script>document.getElementById('f').submit()</script>`);
    });
    await new Promise<void>((r) => evil.listen(0, '127.0.0.1', () => r()));
    const runsBefore = (await (await fetch(`${base}/api/v1/jobs/canary`, { headers: bearer })).json()).runs.length;
    const attack = await ctx.newPage();
    try {
      const answered = attack.waitForResponse((r) => r.url().endsWith('/api/v1/jobs/canary/run'));
      await attack.goto(`http://localhost:${(evil.address() as AddressInfo).port}/`);
      // text/plain gets past body parsing to the auth check: SameSite=Strict kept the cookie home (401).
      expect((await answered).status()).toBe(401);
    } finally {
      await attack.close();
      evil.close();
    }
    expect((await (await fetch(`${base}/api/v1/jobs/canary`, { headers: bearer })).json()).runs.length).toBe(runsBefore);
  });

  it('signs out; the API then refuses the old cookie', async () => {
    const session = (await ctx.cookies(base)).find((c) => c.name === 'relay_console_session')!;
    const cookie = `relay_console_session=${session.value}`;
    expect((await fetch(`${base}/api/v1/jobs`, { headers: { cookie } })).status).toBe(200);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('Admin token').waitFor();
    expect((await fetch(`${base}/api/v1/jobs`, { headers: { cookie } })).status).toBe(401);
    expect((await ctx.cookies(base)).find((c) => c.name === 'relay_console_session')).toBeUndefined();
  });

  it('no page or bundle contains a secret; static routes never serve files outside the bundle', async () => {
    const files: string[] = [];
    const walk = (d: string) => readdirSync(d, { withFileTypes: true }).forEach((e) => (e.isDirectory() ? walk(join(d, e.name)) : files.push(join(d, e.name))));
    walk(CONSOLE_DIST);
    expect(files.some((f) => f.endsWith('.js'))).toBe(true);
    const gzipped = files.reduce((n, f) => n + gzipSync(readFileSync(f)).length, 0);
    expect(gzipped, 'the bundle, gzipped').toBeLessThan(300 * 1024);
    const secrets = [TOKEN, MASTER_KEY, process.env.RELAY_JOBS_ADMIN_TOKEN, process.env.RELAY_JOBS_MASTER_KEY].filter((s): s is string => !!s && s.length >= 8);
    for (const f of files) for (const s of secrets) expect(readFileSync(f, 'utf8').includes(s), f).toBe(false);
    const index = await (await fetch(`${base}/`)).text();
    expect(index).toContain('<div id="app">');
    for (const s of secrets) expect(index).not.toContain(s);
    const asset = files.find((f) => f.endsWith('.js'))!.slice(CONSOLE_DIST.length);
    const res = await fetch(`${base}${asset}`);
    expect(res.headers.get('content-type')).toMatch(/javascript/);
    expect(res.headers.get('content-security-policy')).toContain("default-src 'self'");
    for (const path of [
      '/..%2f..%2f..%2fetc/passwd',
      '/%2e%2e/%2e%2e/etc/passwd',
      '/assets/..%2f..%2f..%2fpackage.json',
      '/..%5c..%5cpackage.json',
      '/%252e%252e/etc/passwd',
      '/assets/%2e%2e/%2e%2e/%2e%2e/src/http/server.ts',
      '/.%00./etc/passwd',
    ]) {
      const r = await fetch(`${base}${path}`);
      const body = await r.text();
      expect(body, path).not.toMatch(/root:x:0|"name": "relay-jobs"|buildHttpServer/);
      if (r.status === 200) expect(body, path).toBe(index);
    }
    // Unknown API paths stay JSON 404s, never the console's fallback page.
    const api = await fetch(`${base}/api/v1/nope`, { headers: bearer });
    expect(api.status).toBe(404);
    expect((await api.json()).error.code).toBe('not_found');
  });
});

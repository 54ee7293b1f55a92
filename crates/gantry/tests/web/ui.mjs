// Gantry's web UI in headless chromium, driven by playwright-core. Started by
// crates/gantry/tests/web.rs against a real cluster; every input comes from the environment.
// Exits non-zero at the first failed check, with a screenshot of the page as it was.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const env = process.env;
const require = createRequire(path.join(env.WEB_NODE_DIR, 'package.json'));
const { chromium } = require('playwright-core');

const BASE = env.GANTRY_URL;
const ART = env.WEB_ARTIFACTS;
const TOKENS = { admin: env.GANTRY_ADMIN_TOKEN, alice: env.GANTRY_ALICE_TOKEN, bob: env.GANTRY_BOB_TOKEN };
// Generous: containers start on a 2-core machine. Never a measurement.
const PATIENCE = 120_000;

// The API, for what the UI does not do (submitting workflows) and to cross-check the UI.
async function api(who, method, p, body, headers = {}) {
  const r = await fetch(BASE + '/api/v1' + p, {
    method,
    headers: { authorization: 'Bearer ' + TOKENS[who], 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${p} as ${who}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

async function submit(who, file, channel) {
  const headers = channel ? { 'x-gantry-channel': channel } : {};
  const r = await api(who, 'POST', '/workflows', { spec: fs.readFileSync(file, 'utf8') }, headers);
  return r.id;
}

async function until(what, fn, ms = PATIENCE) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error('timed out waiting for ' + what);
    await new Promise((r) => setTimeout(r, 250));
  }
}

let shots = 0;
async function shot(page, name) {
  shots += 1;
  const file = path.join(ART, `${String(shots).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
}

let current = null; // the page to photograph if a step fails
async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack || e}`);
    if (current) await current.screenshot({ path: path.join(ART, `FAILED-${name.replace(/\W+/g, '-')}.png`), fullPage: true }).catch(() => {});
    throw e;
  }
}

// Text contrast (WCAG 2): every visible element with its own text, against the first opaque
// background behind it. Returns the failures.
async function contrastFailures(page) {
  return page.evaluate(() => {
    const parse = (c) => {
      const m = c.match(/rgba?\(([^)]+)\)/);
      if (!m) return null;
      const [r, g, b, a = 1] = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
      return { r, g, b, a };
    };
    const lum = ({ r, g, b }) => {
      const ch = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
      return 0.2126 * ch(r) + 0.7152 * ch(g) + 0.0722 * ch(b);
    };
    const background = (el) => {
      for (let e = el; e; e = e.parentElement) {
        const c = parse(getComputedStyle(e).backgroundColor);
        if (c && c.a > 0.9) return c;
      }
      return { r: 255, g: 255, b: 255, a: 1 };
    };
    const fails = [];
    let checked = 0;
    for (const el of document.querySelectorAll('body *')) {
      if (el.closest('svg')) continue; // the graph is checked on its own
      const own = Array.from(el.childNodes).some((n) => n.nodeType === 3 && n.textContent.trim());
      if (!own) continue;
      const r = el.getBoundingClientRect();
      const st = getComputedStyle(el);
      if (r.width < 2 || r.height < 2 || st.visibility === 'hidden' || st.display === 'none') continue;
      if (el.closest('[hidden], .visually-hidden')) continue;
      const fg = parse(st.color);
      const bg = background(el);
      const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
      const ratio = (a + 0.05) / (b + 0.05);
      checked += 1;
      if (ratio < 4.5) fails.push(`${ratio.toFixed(2)}:1 "${el.textContent.trim().slice(0, 40)}" (${st.color} on rgb(${bg.r}, ${bg.g}, ${bg.b}))`);
    }
    // The job graph: each box's text against its box.
    for (const g of document.querySelectorAll('svg g.job')) {
      const fill = parse(getComputedStyle(g.querySelector('rect')).fill);
      for (const t of g.querySelectorAll('text')) {
        const fg = parse(getComputedStyle(t).fill);
        const [a, b] = [lum(fg), lum(fill)].sort((x, y) => y - x);
        checked += 1;
        if ((a + 0.05) / (b + 0.05) < 4.5) fails.push(`graph text "${t.textContent.trim()}"`);
      }
    }
    return { fails, checked };
  });
}

async function checkContrast(page, what) {
  const { fails, checked } = await contrastFailures(page);
  assert.ok(checked > 5, `${what}: only ${checked} text elements checked`);
  assert.deepEqual(fails, [], `${what}: text below 4.5:1 contrast`);
}

// What has keyboard focus now, and whether its focus is visible (an outline or a shadow).
async function focused(page) {
  return page.evaluate(() => {
    const el = document.activeElement;
    if (!el || el === document.body) return null;
    const st = getComputedStyle(el);
    const r = el.getBoundingClientRect();
    return {
      tag: el.tagName.toLowerCase(),
      text: (el.innerText || el.value || el.getAttribute('aria-label') || '').trim().slice(0, 60),
      id: el.id,
      visible: (st.outlineStyle !== 'none' && parseFloat(st.outlineWidth) >= 2) || st.boxShadow !== 'none',
      onScreen: r.width > 0 && r.height > 0 && r.bottom > 0 && r.top < window.innerHeight + 2000,
    };
  });
}

// Loads the page afresh and presses Tab until `want` (a predicate on what is focused) holds.
// The first stop must be the skip link (unless a field has autofocus); every stop must show
// its focus.
async function tabTo(page, what, want, max = 80) {
  await page.reload();
  if (!(await focused(page))) {
    await page.keyboard.press('Tab');
    const first = await focused(page);
    assert.equal(first && first.text, 'Skip to content', `${what}: the first Tab stop is the skip link`);
  }
  for (let i = 0; i < max; i += 1) {
    const f = await focused(page);
    assert.ok(f, `${what}: focus left the page after ${i} Tab presses`);
    assert.ok(f.visible, `${what}: focus on ${f.tag} "${f.text}" is not visible`);
    assert.ok(f.onScreen, `${what}: focus on ${f.tag} "${f.text}" is off screen`);
    if (want(f)) return i;
    await page.keyboard.press('Tab');
  }
  throw new Error(`${what}: not reached in ${max} Tab presses`);
}

async function signIn(page, who) {
  await page.goto(BASE + '/signin');
  await page.fill('#token', TOKENS[who]);
  await page.click('button:has-text("Sign in")');
  await page.waitForURL((u) => !u.pathname.startsWith('/signin'));
}

const browser = await chromium.launch({
  executablePath: env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu'],
});
const newPage = async (perms = []) => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  if (perms.length) await context.grantPermissions(perms, { origin: BASE });
  const page = await context.newPage();
  page.on('pageerror', (e) => console.log('page error:', e.message));
  page.on('console', (m) => { if (m.type() === 'error') console.log('console error:', m.text()); });
  current = page;
  return page;
};

// WEB_ONLY=no-monitoring: a cluster started without --monitoring (web.rs's second test):
// its node pages have no graph section at all.
if (env.WEB_ONLY === 'no-monitoring') {
  try {
    const page = await newPage();
    await step('without monitoring, the node page has no graphs', async () => {
      await signIn(page, 'admin');
      const node = (await api('admin', 'GET', '/nodes')).map((n) => n.name).sort()[0];
      await page.goto(`${BASE}/nodes/${node}`);
      await page.waitForSelector('[data-node-state]');
      assert.equal(await page.locator('[data-node-graphs]').count(), 0, 'no graph section');
      assert.doesNotMatch(await page.textContent('main'), /The last hour|Prometheus/);
      await shot(page, 'node-without-monitoring');
    });
  } finally {
    await browser.close();
  }
  process.exit(0);
}

try {
  const page = await newPage(['clipboard-read', 'clipboard-write']);

  await step('unauthenticated visitors are sent to sign in, and come back after', async () => {
    const r = await page.goto(BASE + '/nodes');
    assert.match(page.url(), /\/signin\?next=%2Fnodes$/);
    assert.equal(r.status(), 200);
    await checkContrast(page, 'sign-in page');
    await tabTo(page, 'sign-in page', (f) => f.id === 'token');
    await page.keyboard.type('gantry_not-a-token');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#signin-error');
    assert.match(await page.textContent('#signin-error'), /not valid/);
    await shot(page, 'signin-refused');
    await page.fill('#token', TOKENS.alice);
    await page.click('button:has-text("Sign in")');
    await page.waitForURL(BASE + '/nodes');
    const cookies = await page.context().cookies();
    const session = cookies.find((c) => c.name === 'gantry_session');
    assert.ok(session, 'a session cookie');
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, 'Lax');
    assert.equal(await page.locator('details.manage').count(), 0, 'a user gets no hold forms');
  });

  let wf;
  await step('a workflow is watched to the end, live', async () => {
    wf = await submit('alice', env.WF_PIPELINE);
    await page.goto(BASE + '/workflows');
    await page.waitForSelector(`a[href="/workflows/${wf}"]`);
    await checkContrast(page, 'workflows page');
    await tabTo(page, 'workflows page', (f) => f.tag === 'button' && f.text === 'Filter');
    await page.fill('#f-q', 'no-such-workflow');
    await page.click('button:has-text("Filter")');
    await page.waitForSelector('text=No workflow matches these filters.');
    await page.fill('#f-q', wf.slice(0, 8));
    await page.click('button:has-text("Filter")');
    assert.equal(await page.locator('tbody tr').count(), 1);
    await shot(page, 'workflows');
    await page.click(`a[href="/workflows/${wf}"]`);
    await page.waitForSelector('[data-wf-status]');
    const before = await page.textContent('[data-wf-status]');
    assert.notEqual(before, 'FINISHED', 'the page opened before the workflow ended');
    await shot(page, 'workflow-running');
    await page.waitForFunction(() => document.querySelector('[data-wf-status]').textContent === 'FINISHED', null, { timeout: PATIENCE });
    assert.ok(await page.locator('#events li.new').count() > 0, 'events arrived live');
    assert.equal(await page.locator('g.job.s-FINISHED').count(), 4, 'every job of the graph FINISHED');
    assert.equal(await page.locator('form[action$="/stop"]').count(), 0, 'no stop button once ended');
    await checkContrast(page, 'workflow page');
    await shot(page, 'workflow-finished');
  });

  await step('a log is followed live', async () => {
    const other = await submit('alice', env.WF_PIPELINE);
    await page.goto(`${BASE}/workflows/${other}/logs/count`);
    await page.waitForFunction(() => document.querySelector('#log').textContent.includes('tick 6'), null, { timeout: PATIENCE });
    await page.waitForSelector('text=End of output');
    assert.equal((await page.textContent('#log')).match(/tick \d/g).length, 6, 'every line once');
    await checkContrast(page, 'log page');
    await shot(page, 'log');
    await page.goto(`${BASE}/workflows/${wf}/logs/square?task=2`);
    assert.match(await page.textContent('#log'), /square of 2 is 4/);
  });

  let broken;
  await step("a failed task's log opens on stderr, shows both, is searched and downloaded", async () => {
    broken = await submit('alice', env.WF_BROKEN);
    await until('the broken workflow to fail', async () => (await api('alice', 'GET', `/workflows/${broken}`)).status === 'FAILED');
    await page.goto(`${BASE}/workflows/${broken}/logs/broken`);
    await page.waitForSelector('[data-failed-default]');
    assert.equal(await page.textContent('nav[aria-label="Stream"] a[aria-current="page"]'), 'stderr');
    await page.waitForSelector('text=End of output');
    assert.match(await page.textContent('#log'), /error: the input file is missing/);
    assert.doesNotMatch(await page.textContent('#log'), /starting up/, 'only stderr');
    await checkContrast(page, 'failed log page');
    await shot(page, 'log-failed-stderr');

    await page.click('nav[aria-label="Stream"] a[data-view="both"]');
    await page.waitForSelector('#log-stdout');
    await page.waitForFunction(() => document.querySelectorAll('[data-live-log]').length === 2
      && document.querySelector('[data-log-state]').textContent.includes('End of output'), null, { timeout: PATIENCE });
    assert.match(await page.textContent('#log-stdout'), /starting up\nreading the input/);
    assert.match(await page.textContent('#log-stderr'), /error: the input file is missing/);

    await tabTo(page, 'log page', (f) => f.id === 'log-q');
    await page.waitForFunction(() => document.querySelector('[data-log-state]').textContent.includes('End of output'), null, { timeout: PATIENCE });
    await page.keyboard.type('INPUT');
    await page.waitForSelector('text=2 matching lines');
    assert.equal(await page.isHidden('#log-stdout'), true, 'the full text gives way to the matches');
    assert.equal(await page.textContent('[data-matches-of="stdout"]'), 'reading the input\n');
    assert.equal(await page.textContent('[data-matches-of="stderr"]'), 'error: the input file is missing\n');
    assert.deepEqual(await page.locator('pre.log-matches mark').allTextContents(), ['input', 'input']);
    await page.fill('#log-q', 'no such words');
    await page.waitForSelector('text=0 matching lines');
    await shot(page, 'log-search');
    await page.fill('#log-q', '');
    assert.equal(await page.isVisible('#log-stdout'), true, 'an empty search shows everything again');

    for (const [stream, want] of [['stdout', 'starting up\nreading the input\n'], ['stderr', 'error: the input file is missing\n']]) {
      const [dl] = await Promise.all([page.waitForEvent('download'), page.click(`a[data-download="${stream}"]`)]);
      assert.match(dl.suggestedFilename(), new RegExp(`^${broken.slice(0, 8)}-broken-attempt1\\.${stream}\\.txt$`));
      assert.equal(fs.readFileSync(await dl.path(), 'utf8'), want, `the downloaded ${stream}`);
    }
  });

  await step('stopping a workflow asks first; dismissing keeps it running', async () => {
    const long = await submit('alice', env.WF_LONG);
    await until('the long workflow to run', async () => (await api('alice', 'GET', `/workflows/${long}`)).status === 'RUNNING');
    await page.goto(`${BASE}/workflows/${long}`);
    await tabTo(page, 'workflow page', (f) => f.tag === 'button' && f.text === 'Stop workflow');
    await page.keyboard.press('Enter');
    await page.waitForSelector('[data-stop-confirm]');
    assert.match(await page.textContent('[data-stop-confirm]'), new RegExp(long));
    assert.match(await page.textContent('[data-stop-tasks]'), /1 running/);
    assert.equal(await page.locator('[data-stop-endpoints]').count(), 0, 'it serves no endpoint');
    await checkContrast(page, 'stop confirmation');
    await shot(page, 'stop-confirm');
    await page.click('a:has-text("Cancel, keep it running")');
    await page.waitForURL(`${BASE}/workflows/${long}`);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await api('alice', 'GET', `/workflows/${long}`)).status, 'RUNNING', 'dismissed: nothing stopped');
    assert.equal(await page.textContent('[data-wf-status]'), 'RUNNING');

    await page.click('button:has-text("Stop workflow")');
    await page.waitForSelector('[data-stop-confirm]');
    await page.click('[data-stop-confirm] button.danger');
    await page.waitForSelector('text=Stop requested');
    await page.waitForFunction(() => document.querySelector('[data-wf-status]').textContent === 'STOPPED', null, { timeout: PATIENCE });
    await shot(page, 'workflow-stopped');
    // Once ended, the confirmation says there is nothing to stop.
    await page.goto(`${BASE}/workflows/${long}/stop`);
    await page.waitForSelector('text=there is nothing to stop');
    assert.equal(await page.locator('[data-stop-confirm]').count(), 0);
  });

  await step('a workflow is started from the New workflow page after a refused file', async () => {
    const before = (await api('alice', 'GET', '/workflows')).length;
    await page.goto(BASE + '/workflows');
    await page.click('a:has-text("New workflow")');
    await page.waitForURL(BASE + '/workflows/new');
    await checkContrast(page, 'new workflow page');
    await tabTo(page, 'new workflow page', (f) => f.tag === 'button' && f.text === 'Validate');
    await page.fill('#spec', fs.readFileSync(env.WF_MISSPELT, 'utf8'));
    await page.click('button:has-text("Validate")');
    await page.waitForSelector('[data-validation="invalid"]');
    const d = page.locator('[data-diagnostic]').first();
    const line = Number(await d.getAttribute('data-line'));
    assert.equal(line, 5, 'the problem is on the misspelt line');
    assert.match(await d.textContent(), /line 5, column \d+/);
    assert.match(await d.textContent(), /comand/);
    assert.match(await page.inputValue('#spec'), /comand/, 'the text is kept');
    await checkContrast(page, 'new workflow page with problems');
    await shot(page, 'new-workflow-invalid');
    await d.locator('a.diag-pos').click();
    const selected = await page.evaluate(() => {
      const ta = document.querySelector('#spec');
      return document.activeElement === ta ? ta.value.slice(ta.selectionStart, ta.selectionEnd) : null;
    });
    assert.equal(selected, '    comand: [ echo, hi ]', 'the position selects its line');
    // Starting the bad file is refused the same way, and stores nothing.
    await page.click('button:has-text("Start workflow")');
    await page.waitForSelector('[data-validation="invalid"]');
    assert.equal(page.url(), BASE + '/workflows/new');
    assert.equal((await api('alice', 'GET', '/workflows')).length, before, 'a bad file starts nothing');

    await page.fill('#spec', '');
    await page.fill('#wf-name', '');
    await page.setInputFiles('#spec-file', env.WF_HELLO);
    await page.waitForFunction(() => document.querySelector('#spec').value.includes('hello from the web'));
    assert.equal(await page.inputValue('#wf-name'), 'hello', 'named after the file');
    await page.click('button:has-text("Validate")');
    await page.waitForSelector('[data-validation="valid"]');
    await page.click('button:has-text("Start workflow")');
    await page.waitForURL(/\/workflows\/[0-9a-f-]{36}\?done=started$/);
    await page.waitForSelector('text=Workflow started.');
    const id = page.url().match(/workflows\/([0-9a-f-]{36})/)[1];
    const w = await api('alice', 'GET', `/workflows/${id}`);
    assert.equal(w.owner, 'alice');
    assert.equal(w.name, 'hello');
    await page.waitForFunction(() => document.querySelector('[data-wf-status]').textContent === 'FINISHED', null, { timeout: PATIENCE });
    await shot(page, 'new-workflow-started');
  });

  await step("another group's user sees none of it (404)", async () => {
    const bob = await newPage();
    await signIn(bob, 'bob');
    const r = await bob.goto(`${BASE}/workflows/${wf}`);
    assert.equal(r.status(), 404);
    assert.equal(await bob.textContent('h1'), 'Not found');
    await bob.goto(BASE + '/workflows');
    assert.equal(await bob.locator(`a[href="/workflows/${wf}"]`).count(), 0);
    const live = await bob.request.get(`${BASE}/workflows/${wf}/logs/count`);
    assert.equal(live.status(), 404);
    for (const p of [`/workflows/${broken}/logs/broken/download?stream=stderr`, `/workflows/${broken}/stop`]) {
      const r2 = await bob.request.get(BASE + p);
      assert.equal(r2.status(), 404, p);
      assert.doesNotMatch(await r2.text(), /input file/, p);
    }
    // Starting a workflow needs the session's CSRF token, like every form.
    const before = (await api('bob', 'GET', '/workflows')).length;
    const forged = await bob.request.post(BASE + '/workflows/new', { form: { spec: fs.readFileSync(env.WF_HELLO, 'utf8'), action: 'start' } });
    assert.equal(forged.status(), 403, 'a form without the CSRF token');
    assert.equal((await api('bob', 'GET', '/workflows')).length, before, 'nothing started');
    // Without a session: sent to sign in, nothing shown.
    for (const p of ['/workflows/new', `/workflows/${broken}/stop`, `/workflows/${broken}/logs/broken/download?stream=stderr`]) {
      const r3 = await fetch(BASE + p, { redirect: 'manual' });
      assert.equal(r3.status, 303, p);
      assert.match(r3.headers.get('location'), /^\/signin\?next=/, p);
    }
    await shot(bob, 'other-user-404');
    await bob.context().close();
    current = page;
  });

  await step('an administrator holds and releases a node, by keyboard', async () => {
    const admin = await newPage();
    await signIn(admin, 'admin');
    await admin.goto(BASE + '/nodes');
    await checkContrast(admin, 'nodes page');
    const node = (await api('admin', 'GET', '/nodes')).map((n) => n.name).sort()[0];
    await tabTo(admin, 'nodes page', (f) => f.tag === 'summary' && f.text === `Hold or release ${node}`);
    await admin.keyboard.press('Enter'); // opens the disclosure
    await admin.keyboard.press('Tab');
    let f = await focused(admin);
    assert.equal(f.tag, 'select', 'the hold type comes next');
    await admin.keyboard.press('Tab');
    await admin.keyboard.type('web test: DIMM replacement');
    await admin.keyboard.press('Tab');
    f = await focused(admin);
    assert.equal(f.text, 'Place hold');
    await admin.keyboard.press('Enter');
    await admin.waitForSelector('text=Hold placed.');
    const row = admin.locator(`tr:has(a:text-is("${node}"))`);
    assert.equal(await row.locator('[data-node-state]').textContent(), 'CORDONED');
    assert.match(await row.textContent(), /web test: DIMM replacement/);
    assert.match(await row.textContent(), /administrator, placed by admin/);
    assert.equal((await api('admin', 'GET', `/nodes/${node}`)).state, 'CORDONED');
    await shot(admin, 'node-held');
    await row.locator('summary').click();
    await row.locator('input[name="reason"]').nth(1).fill('web test: DIMM replaced');
    await row.locator('button:has-text("Release")').click();
    await admin.waitForSelector('text=Holds released.');
    assert.equal(await admin.locator(`tr:has(a:text-is("${node}")) [data-node-state]`).textContent(), 'READY');
    await admin.click(`a:text-is("${node}")`);
    await admin.waitForSelector('h1');
    assert.match(await admin.textContent('main'), /released .* by admin: web test: DIMM replaced/);
    await checkContrast(admin, 'node page');
    await shot(admin, 'node-released');

    // The graphs of the last hour, once Prometheus has scraped the node a few times.
    await until('three graphs with samples', async () => {
      await admin.reload();
      const n = await admin.evaluate(() => Array.from(document.querySelectorAll('[data-node-graphs] figure[data-graph]'))
        .filter((f) => Number(f.dataset.samples) > 0 && f.querySelector('polyline')).map((f) => f.dataset.graph));
      return n.length === 3 && n.join() === 'cpu,memory,running';
    });
    assert.equal(await admin.locator('[data-graphs-error]').count(), 0);
    assert.match(await admin.textContent('figure[data-graph="memory"] [data-graph-now]'), /[KMG]iB/);
    assert.match(await admin.textContent('figure[data-graph="running"] [data-graph-now]'), /^\d+$/);
    await checkContrast(admin, 'node page with graphs');
    await shot(admin, 'node-graphs');
    await admin.context().close();
    current = page;
  });

  await step('an endpoint is created and its URL copied', async () => {
    await page.goto(BASE + '/endpoints');
    await checkContrast(page, 'endpoints page');
    await tabTo(page, 'endpoints page', (f) => f.id === 'ep-name');
    await page.keyboard.type('chat');
    await page.selectOption('#ep-scope', 'public');
    await page.click('button:has-text("Create endpoint")');
    await page.waitForURL(`${BASE}/endpoints/chat?done=created`);
    await page.waitForSelector('text=Endpoint created.');
    assert.equal(await page.textContent('[data-endpoint-status]'), 'no backend');
    await page.click('button.copy');
    await page.waitForSelector('button.copy:has-text("Copied")');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), `${BASE}/e/chat/`);
    await shot(page, 'endpoint-created');
  });

  await step('a takeover an MCP client asked for waits for approval on the page', async () => {
    const v1 = await submit('alice', env.WF_MODEL_V1, 'cli');
    // The page refreshes itself: no reloads from here on.
    await page.waitForFunction((id) => {
      const s = document.querySelector('[data-endpoint-serving]');
      return document.querySelector('[data-endpoint-status]').textContent === 'serving' && s && s.textContent.includes(id.slice(0, 8));
    }, v1, { timeout: PATIENCE });
    await shot(page, 'endpoint-serving-v1');
    const v2 = await submit('alice', env.WF_MODEL_V2, 'mcp');
    await page.waitForSelector('button:has-text("Approve takeover of chat")', { timeout: PATIENCE });
    const pending = await page.textContent('[data-takeover]');
    assert.match(pending, /AWAITING_CONFIRMATION/);
    assert.match(pending, /asked by alice's MCP client \(an agent\)/);
    assert.match(pending, new RegExp(v2.slice(0, 8)));
    assert.equal(await (await fetch(`${BASE}/e/chat/`)).text(), 'v1\n', 'nothing switches before approval');
    await checkContrast(page, 'endpoint page');
    await shot(page, 'takeover-awaiting-approval');
    await page.click('button:has-text("Approve takeover of chat")');
    await page.waitForSelector('text=Takeover approved');
    await page.waitForFunction((id) => {
      const s = document.querySelector('[data-endpoint-serving]');
      return document.querySelector('[data-endpoint-status]').textContent === 'serving' && s.textContent.includes(id.slice(0, 8))
        && document.querySelector('[data-history]') && document.querySelector('[data-history]').textContent.includes('DONE');
    }, v2, { timeout: PATIENCE });
    assert.match(await page.textContent('[data-history]'), /alice via web/);
    assert.equal(await (await fetch(`${BASE}/e/chat/`)).text(), 'v2\n');
    await until('v1 to stop', async () => (await api('alice', 'GET', `/workflows/${v1}`)).status === 'STOPPED');
    await shot(page, 'takeover-done');
    // Stopping v2 would leave chat without a backend: its confirmation says so.
    await page.goto(`${BASE}/workflows/${v2}/stop`);
    assert.match(await page.textContent('[data-stop-endpoints]'), /the endpoint chat: it has no backend once it stops/);
    await shot(page, 'stop-confirm-endpoint');
    await page.click('a:has-text("Cancel, keep it running")');
    await page.waitForURL(`${BASE}/workflows/${v2}`);
    assert.equal(await (await fetch(`${BASE}/e/chat/`)).text(), 'v2\n', 'still served');
  });

  await step('deleting an endpoint needs its name typed', async () => {
    await page.goto(BASE + '/endpoints');
    await page.fill('#ep-name', 'scratch');
    await page.click('button:has-text("Create endpoint")');
    await page.waitForURL(/\/endpoints\/scratch/);
    const del = page.locator('button:has-text("Delete scratch")');
    assert.equal(await del.isDisabled(), true);
    await page.fill('#delete-confirm', 'scratc');
    assert.equal(await del.isDisabled(), true);
    await page.fill('#delete-confirm', 'scratch');
    assert.equal(await del.isDisabled(), false);
    await shot(page, 'endpoint-delete-confirm');
    await del.click();
    await page.waitForURL(`${BASE}/endpoints?done=deleted`);
    assert.equal(await page.locator('tr[data-endpoint="scratch"]').count(), 0);
    assert.equal(await page.locator('tr[data-endpoint="chat"]').count(), 1);
    await shot(page, 'endpoints');
  });

  await step('a built image and its build log are on the Images page', async () => {
    const b = await submit('alice', env.WF_BUILD);
    await until('the build workflow to finish', async () => {
      const s = (await api('alice', 'GET', `/workflows/${b}`)).status;
      if (s === 'FAILED' || s === 'STOPPED') throw new Error('the build workflow ended ' + s);
      return s === 'FINISHED';
    });
    await page.goto(BASE + '/images');
    await page.waitForSelector('h3:has-text("user/alice")');
    assert.match(await page.textContent('main'), /tool:/);
    const key = page.locator('code[data-image-key]').filter({ hasText: 'tool:' }).first();
    const full = await key.getAttribute('data-image-key');
    assert.match(full, /^[0-9a-f]{64}$/, 'a build key');
    assert.match(await key.textContent(), new RegExp(`tool:${full.slice(0, 12)}…$`), 'shown shortened');
    assert.match(await key.getAttribute('title'), new RegExp(`tool:${full}$`));
    const row = page.locator('tr', { has: key });
    await row.locator('button.copy').click();
    await row.locator('button.copy:has-text("Copied")').waitFor();
    assert.match(await page.evaluate(() => navigator.clipboard.readText()), new RegExp(`tool:${full}$`), 'the full key is copied');
    // The layout: every table within the window and its box, the page not wider than the window.
    const layout = await page.evaluate(() => ({
      width: document.documentElement.clientWidth,
      page: document.documentElement.scrollWidth,
      tables: Array.from(document.querySelectorAll('main table')).map((t) => ({
        right: t.getBoundingClientRect().right, over: t.parentElement.scrollWidth - t.parentElement.clientWidth,
      })),
    }));
    assert.ok(layout.tables.length >= 2, 'the images and builds tables');
    for (const t of layout.tables) {
      assert.ok(t.right <= layout.width, `a table ends at ${t.right}px, past the window (${layout.width}px)`);
      assert.equal(t.over, 0, 'a table overflows its box');
    }
    assert.ok(layout.page <= layout.width, `the page is ${layout.page}px wide in a ${layout.width}px window`);
    await checkContrast(page, 'images page');
    await tabTo(page, 'images page', (f) => f.tag === 'a' && f.text.startsWith('Build log'));
    await shot(page, 'images');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#log');
    await page.waitForSelector('text=End of output');
    assert.ok((await page.textContent('#log')).length > 0, 'the build log has text');
    await shot(page, 'build-log');
  });

  await step('the Volumes page lists her volumes and her group\'s, not another group\'s', async () => {
    await api('alice', 'POST', '/volumes', { name: 'results' });
    await api('alice', 'POST', '/volumes', { name: 'shared', scope: 'group' });
    await api('bob', 'POST', '/volumes', { name: 'bobs-own' });
    await page.goto(BASE + '/volumes');
    await page.waitForSelector('th:has-text("volume://user/persistent/results")');
    const main = await page.textContent('main');
    assert.match(main, /volume:\/\/group\/persistent\/shared/);
    assert.doesNotMatch(main, /bobs-own/);
    assert.equal(await page.locator('nav a[aria-current="page"]').textContent(), 'Volumes');
    await checkContrast(page, 'volumes page');
    await shot(page, 'volumes');
  });

  await step('without a Prometheus, the node page has no graphs', async () => {
    const key = 'monitoring.prometheus_url';
    const was = (await api('admin', 'GET', `/admin/settings/${key}`)).value;
    assert.match(was, /^http:\/\/127\.0\.0\.1:\d+$/, 'gantry up --monitoring set it');
    const node = (await api('admin', 'GET', '/nodes')).map((n) => n.name).sort()[0];
    await page.goto(`${BASE}/nodes/${node}`);
    assert.equal(await page.locator('[data-node-graphs] figure').count(), 3, 'a user sees them too');
    await api('admin', 'PUT', `/admin/settings/${key}`, { key, value: '' });
    await page.reload();
    await page.waitForSelector('h1');
    assert.equal(await page.locator('[data-node-graphs]').count(), 0, 'no graph section');
    await shot(page, 'node-no-graphs');
    await api('admin', 'PUT', `/admin/settings/${key}`, { key, value: was });
  });

  await step('signing out ends the session', async () => {
    await page.goto(BASE + '/workflows');
    await page.click('button:has-text("Sign out")');
    await page.waitForURL(BASE + '/signin');
    await page.goto(BASE + '/workflows');
    assert.match(page.url(), /\/signin\?next=/);
  });
} finally {
  await browser.close();
}
console.log(`${shots} screenshots in ${ART}`);

// UI benchmark (prints figures; not a test). Against a running gpuq with simulated cards:
//   GPUQ_E2E_URL=http://127.0.0.1:3000 GPUQ_E2E_ADMIN_PASSWORD=… node bench/ui.mjs [rounds]
// 1. Dashboard load, signed in, in headless Chromium: server response (TTFB), DOMContentLoaded,
//    load, and "interactive" (the WASM has hydrated: a client-only control answers), per load;
//    then direct loads of pages whose code is a lazy chunk, until they have hydrated.
// 2. Live latency: an admin changes a card's state through the REST API; we time (a) the SSE event
//    reaching an EventSource in the page and (b) the dashboard's DOM showing the new state, both
//    from just before the request is sent. Browser and bench share one clock (same machine).
import { chromium } from "@playwright/test";

const base = process.env.GPUQ_E2E_URL ?? "http://127.0.0.1:3000";
const password = process.env.GPUQ_E2E_ADMIN_PASSWORD ?? "e2e-admin-password";
const rounds = Number(process.argv[2] ?? 20);

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const show = (name, xs) =>
  console.log(
    `${name.padEnd(34)} p50 ${pct(xs, 50).toFixed(1).padStart(7)} ms   p95 ${pct(xs, 95).toFixed(1).padStart(7)} ms   max ${Math.max(...xs).toFixed(1).padStart(7)} ms   (n=${xs.length})`,
  );

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
});
const context = await browser.newContext({ baseURL: base });
const page = await context.newPage();

// Sign in through the form (the session cookie stays in the context).
await page.goto("/login");
await page.getByLabel("Username").fill("admin");
await page.getByLabel("Password").fill(password);
await page.getByRole("button", { name: "Sign in" }).click();
await page.getByRole("heading", { name: "Welcome, admin" }).waitFor();

const tokenRes = await fetch(`${base}/api/v1/tokens`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ username: "admin", password, name: `ui-bench-${Date.now()}` }),
});
const bearer = `Bearer ${(await tokenRes.json()).token}`;
const gpus = (await (await fetch(`${base}/api/v1/gpus`, { headers: { Authorization: bearer } })).json()).gpus;
const card = gpus[gpus.length - 1];

// 1. Dashboard loads.
const ttfb = [], dcl = [], load = [], interactive = [];
for (let i = 0; i < rounds + 1; i++) {
  const t0 = Date.now();
  await page.goto("/", { waitUntil: "load" });
  // Interactive: a button that only works once hydrated.
  await page.locator("#check-status").click();
  await page.locator("#status-result").filter({ hasText: "Database: ok" }).waitFor();
  const t1 = Date.now();
  const nav = await page.evaluate(() => performance.getEntriesByType("navigation")[0].toJSON());
  if (i === 0) {
    console.log(`dashboard, first load (cold caches): interactive in ${t1 - t0} ms`);
    continue;
  }
  ttfb.push(nav.responseStart);
  dcl.push(nav.domContentLoadedEventEnd);
  load.push(nav.loadEventEnd);
  interactive.push(t1 - t0);
}
console.log(`\nDashboard load on ${base} (warm, ${rounds} loads; ${gpus.length} cards)`);
show("server response (TTFB)", ttfb);
show("DOMContentLoaded", dcl);
show("load (WASM fetched)", load);
show("interactive (hydrated + one call)", interactive);

// 1b. Pages whose code is a lazy chunk: direct load until the page has hydrated.
for (const path of ["/submit", "/manifest", "/usage"]) {
  const times = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = Date.now();
    await page.goto(path, { waitUntil: "commit" });
    await page.locator(`body[data-hydrated="${path}"]`).waitFor({ state: "attached" });
    times.push(Date.now() - t0);
  }
  show(`${path}: loaded and hydrated`, times);
}

// 2. Live latency.
await page.goto("/", { waitUntil: "load" });
await page.locator("#check-status").click();
await page.locator("#status-result").filter({ hasText: "Database: ok" }).waitFor();
await page.evaluate(() => {
  window.__events = [];
  const es = new EventSource("/api/v1/events");
  es.addEventListener("cards", () => window.__events.push(Date.now()));
  es.addEventListener("changed", () => window.__events.push(Date.now()));
  window.__es = es;
});
await page.waitForTimeout(500);
const sse = [], dom = [];
const selector = `article.gpu[data-gpu='${card.index}'] p.muted`;
for (let i = 0; i < rounds; i++) {
  const state = i % 2 === 0 ? "draining" : "online";
  await page.evaluate(() => (window.__events = []));
  const watch = page.evaluate(
    ([sel, want]) =>
      new Promise((resolve) => {
        const check = () => {
          const el = document.querySelector(sel);
          if (el && el.textContent.includes(want)) {
            resolve(Date.now());
            return true;
          }
          return false;
        };
        if (check()) return;
        const obs = new MutationObserver(() => check() && obs.disconnect());
        obs.observe(document.body, { subtree: true, childList: true, characterData: true });
      }),
    [selector, state],
  );
  const t0 = Date.now();
  const res = await fetch(`${base}/api/v1/gpus/${card.uuid}`, {
    method: "PATCH",
    headers: { Authorization: bearer, "content-type": "application/json" },
    body: JSON.stringify({ state }),
  });
  if (res.status !== 204) throw new Error(`PATCH answered ${res.status}`);
  const shown = await watch;
  const events = await page.evaluate(() => window.__events);
  if (events.length > 0) sse.push(events[0] - t0);
  dom.push(shown - t0);
  await page.waitForTimeout(150);
}
await fetch(`${base}/api/v1/gpus/${card.uuid}`, {
  method: "PATCH",
  headers: { Authorization: bearer, "content-type": "application/json" },
  body: JSON.stringify({ state: "online" }),
});
console.log(`\nLive latency: REST change of a card's state → page (${rounds} changes)`);
show("SSE event received by the page", sse);
show("dashboard DOM shows the new state", dom);
await browser.close();

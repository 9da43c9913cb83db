// Interactive sessions with a real Jupyter Notebook (the image gpuq-test/jupyter:latest that the
// test command builds): the owner opens it through gpuq and runs a cell over the kernel's
// WebSocket through the proxy; another member gets 403; a page on the session origin cannot read
// gpuq's API. Then the image's echo server, which logs every request's headers: the gpuq cookie the
// browser holds for the session's host, and a token a page sets, never reach the container.
import { test, expect, type APIRequestContext, type Page } from "@playwright/test";
import { adminBearer, ensureUser, jobStatus, open, signIn, tokenFor, waitForServer } from "./util";

const sessionsUrl = process.env.GPUQ_E2E_SESSIONS_URL ?? "";

const notebook = [
  "sh",
  "-c",
  "exec jupyter notebook --ip=0.0.0.0 --port=8888 --no-browser --NotebookApp.token='' " +
    "--NotebookApp.password='' --NotebookApp.base_url=$GPUQ_SESSION_BASE " +
    "--NotebookApp.allow_remote_access=True --NotebookApp.notebook_dir=/tmp",
];

/** The image's echo server (tests/fixtures/jupyter/echo.py): one log line per request. */
const echo = ["python3", "/opt/gpuq/echo.py"];

async function startSession(request: APIRequestContext, bearer: string, command: string[], name: string): Promise<string> {
  const res = await request.post("/api/v1/jobs", {
    headers: { Authorization: bearer },
    data: { image: "gpuq-test/jupyter:latest", command, port: 8888, min_vram_mb: 1000, name },
  });
  expect(res.status(), await res.text()).toBe(201);
  const id = (await res.json()).job_id as string;
  await expect.poll(() => jobStatus(request, bearer, id), { timeout: 60_000 }).toBe("running");
  await expect
    .poll(async () => (await (await request.get(`/api/v1/jobs/${id}`, { headers: { Authorization: bearer } })).json()).session_url, {
      timeout: 30_000,
    })
    .toBe(`${sessionsUrl}/s/${id}/`);
  return id;
}

/** Signs `user` in and opens their session with its job page's Open button: the tab it opens. */
async function openFromJobPage(page: Page, user: string, id: string): Promise<Page> {
  await signIn(page, user);
  await open(page, `/jobs/${id}`);
  const [tab] = await Promise.all([page.context().waitForEvent("page"), page.locator("#open-session").click()]);
  return tab;
}

/** Sets the launch policy's `network` (the browser tests run with `none`: global-setup.ts). */
async function setNetwork(request: APIRequestContext, network: string) {
  const headers = { Authorization: await adminBearer(request) };
  const policy = await (await request.get("/api/v1/settings/launch-policy", { headers })).json();
  const saved = await request.put("/api/v1/settings/launch-policy", { headers, data: { ...policy, network } });
  expect(saved.status(), await saved.text()).toBe(200);
}

// A session is reached on the isolated job network, which the other browser tests go without.
// The tests run one at a time (workers: 1), and the container starts before any page is open, so
// its network link coming up cannot abort a page's load.
test.beforeAll(async ({ request }) => {
  if (sessionsUrl) await setNetwork(request, "isolated");
});
test.afterAll(async ({ request }) => {
  if (sessionsUrl) await setNetwork(request, "none");
});

test("the owner runs a notebook cell through gpuq; nobody else gets in", async ({ page, browser, request }) => {
  test.skip(!sessionsUrl, "the server runs without --sessions-listen");
  await waitForServer(request);
  await ensureUser(request, "nora");
  await ensureUser(request, "nils");
  const bearer = await tokenFor(request, "nora");
  const id = await startSession(request, bearer, notebook, "notebook");

  const tab = await openFromJobPage(page, "nora", id);
  await tab.waitForURL(new RegExp(`/s/${id}/`), { timeout: 30_000 });
  expect(tab.url()).not.toContain("gpuq_code");
  // Until Jupyter listens, gpuq answers with a page that reloads itself; then Jupyter sends the
  // browser on to its file tree.
  await tab.waitForURL(new RegExp(`/s/${id}/tree`), { timeout: 60_000 });

  // A notebook made through Jupyter's own API (its XSRF cookie is the app's, not gpuq's).
  const created = await tab.evaluate(async (base) => {
    const xsrf = document.cookie.split("; ").find((c) => c.startsWith("_xsrf="))?.slice(6) ?? "";
    const r = await fetch(`${base}api/contents/probe.ipynb`, {
      method: "PUT",
      headers: { "Content-Type": "application/json", "X-XSRFToken": decodeURIComponent(xsrf) },
      body: JSON.stringify({ type: "notebook", format: "json", content: { cells: [], metadata: {}, nbformat: 4, nbformat_minor: 5 } }),
    });
    return r.status;
  }, `/s/${id}/`);
  expect([200, 201]).toContain(created);
  await tab.goto(`${sessionsUrl}/s/${id}/notebooks/probe.ipynb`);
  const cell = tab.locator(".CodeMirror").first();
  await expect(tab.locator("#kernel_indicator_icon.kernel_idle_icon")).toBeAttached({ timeout: 60_000 });
  await cell.click();
  await tab.keyboard.type('import os; print("gpus=" + os.environ["GPUQ_GPUS"])');
  await tab.keyboard.press("Shift+Enter");
  await expect(tab.locator(".output_area").first()).toContainText("gpus=GPU-", { timeout: 60_000 });

  // A script on the session origin cannot read gpuq's API with the user's cookie.
  const ui = new URL(page.url()).origin;
  const stolen = await tab.evaluate(async (ui) => {
    try {
      const r = await fetch(`${ui}/api/v1/me`, { credentials: "include" });
      return `read ${r.status}: ${await r.text()}`;
    } catch (e) {
      return "refused";
    }
  }, ui);
  expect(stolen === "refused" || !stolen.includes("nora")).toBe(true);

  // Another member opening the same session: 403 from gpuq, nothing reaches the container.
  const other = await browser.newContext();
  const otherPage = await other.newPage();
  await signIn(otherPage, "nils");
  const refused = await otherPage.goto(`/api/v1/jobs/${id}/session`);
  expect(refused?.status()).toBe(403);
  const direct = await otherPage.goto(`${sessionsUrl}/s/${id}/tree`);
  expect(direct?.status()).toBe(403);
  await other.close();

  await request.post(`/api/v1/jobs/${id}/cancel`, { headers: { Authorization: bearer } });
  await expect.poll(() => jobStatus(request, bearer, id), { timeout: 60_000 }).toBe("cancelled");
});

test("gpuq's cookie in the browser and a token a page sets never reach the container", async ({ page, request }) => {
  test.skip(!sessionsUrl, "the server runs without --sessions-listen");
  await waitForServer(request);
  await ensureUser(request, "nadia");
  const bearer = await tokenFor(request, "nadia");
  const id = await startSession(request, bearer, echo, "echo");

  const tab = await openFromJobPage(page, "nadia", id);
  await expect(tab.locator("body")).toHaveText(`echo GET /s/${id}/`, { timeout: 60_000 });

  // The session listener is on the UI's host, another port: cookies ignore ports, so the browser
  // sends gpuq's own session cookie with every request to the session origin. Only the proxy
  // keeps it from the container.
  const sent = (await page.context().cookies(sessionsUrl)).find((c) => c.name === "gpuq_session");
  expect(sent, "the browser holds gpuq's cookie for the session's host").toBeTruthy();
  // A page on the session origin sends a real gpuq token of its own accord.
  const answer = await tab.evaluate(
    async ([path, token]) => {
      const r = await fetch(path, { headers: { Authorization: token }, credentials: "include" });
      return `${r.status} ${await r.text()}`;
    },
    [`/s/${id}/probe`, bearer],
  );
  expect(answer).toBe(`200 echo GET /s/${id}/probe`);

  // What reached the container, as its echo server logged it.
  const log = await (await request.get(`/api/v1/jobs/${id}/logs`, { headers: { Authorization: bearer } })).text();
  const seen = log
    .split("\n")
    .filter((l) => l.startsWith("gpuq-echo-request "))
    .map((l) => JSON.parse(l.slice("gpuq-echo-request ".length)) as { path: string; headers: [string, string][] });
  const probe = seen.find((r) => r.path === `/s/${id}/probe`);
  expect(probe, log).toBeTruthy();
  expect(seen.length).toBeGreaterThanOrEqual(2);
  for (const r of seen) {
    const names = r.headers.map(([k]) => k.toLowerCase());
    expect(names, JSON.stringify(r)).not.toContain("authorization");
    const all = JSON.stringify(r.headers);
    expect(all).not.toContain(sent!.value);
    expect(all).not.toContain(bearer.slice("Bearer ".length));
    expect(all).not.toContain("gpuq_");
  }
  await request.post(`/api/v1/jobs/${id}/cancel`, { headers: { Authorization: bearer } });
  await expect.poll(() => jobStatus(request, bearer, id), { timeout: 60_000 }).toBe("cancelled");
});

import { test, expect, type APIRequestContext, type Page } from "@playwright/test";
import { ensureUser, jobStatus, open, signIn, tokenFor, waitForServer } from "./util";

test("a member submits through the form and watches the job run to the end without reloading", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "maria");
  await signIn(page, "maria");

  // The dashboard shows every card with its memory bar.
  await expect(page.locator("article.gpu")).toHaveCount(2);
  await expect(page.locator("#queue-summary")).toContainText("Nobody is waiting");
  await page.screenshot({ path: "screenshots/dashboard-member.png", fullPage: true });

  await page.getByRole("link", { name: "Submit", exact: true }).click();
  await expect(page.getByRole("heading", { name: "Submit a job" })).toBeVisible();
  await page.getByLabel("Image").fill("gpuq-test/busybox:latest");
  await page.getByLabel("Command").fill("sh -c 'echo hello-from-e2e; sleep 3; echo done'");
  await page.getByLabel("VRAM per card (MiB)").fill("1000");
  await page.getByLabel("Name (optional)").fill("e2e-job");

  // A reserved variable is refused next to its field, by the same parser as the API.
  await page.getByLabel("Environment (KEY=value per line)").fill("LD_PRELOAD=/evil.so");
  await page.getByRole("button", { name: "Submit" }).click();
  await expect(page.locator(".field-error")).toContainText("env.LD_PRELOAD");
  await page.getByLabel("Environment (KEY=value per line)").fill("GREETING=hi");

  // The preview says where it would run before anything is submitted.
  await page.getByLabel("Name (optional)").focus();
  await expect(page.locator("#preview")).toContainText("fits now on GPU");
  await page.screenshot({ path: "screenshots/submit.png", fullPage: true });

  await page.getByRole("button", { name: "Submit" }).click();
  await expect(page).toHaveURL(/\/jobs\/[0-9a-f-]{36}$/);
  const url = page.url();
  // Live: no reload from here on.
  await expect(page.locator("#job-status")).toHaveText("running", { timeout: 30_000 });
  await expect(page.locator("#log")).toContainText("hello-from-e2e", { timeout: 15_000 });
  await expect(page.locator("#job-status")).toHaveText("succeeded", { timeout: 30_000 });
  await expect(page.locator("#log")).toContainText("done");
  await expect(page.locator(".timeline li[data-kind='fence_verified']")).toBeVisible();
  expect(page.url()).toBe(url);
  await page.screenshot({ path: "screenshots/job.png", fullPage: true });
});

test("a job that can never run here is explained before submission", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "marco");
  await signIn(page, "marco");
  await open(page, "/submit");
  await page.getByLabel("Image").fill("gpuq-test/busybox:latest");
  await page.getByLabel("Command").fill("true");
  await page.getByLabel("VRAM per card (MiB)").fill("90000");
  await page.getByLabel("Name (optional)").focus();
  await expect(page.locator("#preview")).toContainText("can never run here");
});

test("a big job waits with its reason on the queue page, then starts when the cards free up", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "maria");
  await ensureUser(request, "marco");
  const maria = await tokenFor(request, "maria");
  const marco = await tokenFor(request, "marco");
  // Maria's job holds both cards long enough to sign in and open two pages on a loaded machine.
  const first = await request.post("/api/v1/jobs", {
    headers: { Authorization: maria },
    data: { image: "gpuq-test/busybox:latest", command: ["sleep", "15"], gpu_count: 2, min_vram_mb: 20000, name: "holder" },
  });
  expect(first.status()).toBe(201);
  // Maria ran a job in an earlier test and Marco did not, so under fair share a pass that saw
  // both queued would rightly start Marco's first. The holder must hold the cards before the
  // big job exists (a loaded machine coalesced the two submissions into one pass).
  const holderId = (await first.json()).job_id as string;
  await expect.poll(() => jobStatus(request, maria, holderId), { timeout: 30_000 }).toBe("running");
  const second = await request.post("/api/v1/jobs", {
    headers: { Authorization: marco },
    data: { image: "gpuq-test/busybox:latest", command: ["true"], min_vram_mb: 20000, name: "big-wait" },
  });
  expect(second.status()).toBe(201);

  await signIn(page, "marco");
  // The dashboard shows the holder on both cards, with how long it has run.
  for (const card of [0, 1]) {
    const holders = page.locator(`article.gpu[data-gpu='${card}'] .holders`);
    await expect(holders).toContainText("holder · maria · 20000 MiB");
    await expect(holders).toContainText(/running \d+ s/);
  }
  await page.getByRole("link", { name: "Jobs", exact: true }).click();
  await page.getByLabel("Only mine").check();
  const row = page.locator("#jobs tbody tr", { hasText: "big-wait" });
  await expect(row).toContainText("queued");
  await expect(row.locator("td.wait")).toContainText("needs 20000 MiB");
  await page.screenshot({ path: "screenshots/queue.png", fullPage: true });
  // When the holder ends, the waiting job starts and finishes: the row changes in place.
  await expect(row).toContainText("succeeded", { timeout: 45_000 });
});

test("the queue page pages through history", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "maria");
  await signIn(page, "maria");
  await page.goto("/jobs");
  const pager = page.locator("nav.pager");
  await expect(pager).toContainText("page 1 of");
  await expect(page.getByRole("button", { name: "Previous" })).toBeDisabled();
  await expect(pager.getByRole("button")).toHaveCount(2);
  await expect(pager.getByRole("button", { name: "Next", exact: true })).toBeDisabled();
});

test("an address that holds no job id says so, and shows no log", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "maria");
  await signIn(page, "maria");
  await open(page, "/jobs/not-a-job");
  await expect(page.locator("p.card.error")).toHaveText("Not a job id.");
  await expect(page.locator("#log")).toHaveCount(0);
});

// Server-side rendering may build a signed-in page more than once. When each build read the job
// anew, a job moving on in between (queued → admitted → starting within milliseconds) gave the
// browser markup from one read and hydration data from another: hydration failed and the page
// never updated again. Opened right after each submission, the page must hydrate cleanly and
// follow its job to the end, every time, on the job page, the queue and the dashboard.
test("pages opened while a job moves through its states hydrate and go live", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "hugo");
  await signIn(page, "hugo");
  const hydrationErrors: string[] = [];
  page.on("console", (m) => { if (/hydrat|panicked/i.test(m.text())) hydrationErrors.push(m.text()); });
  const bearer = await tokenFor(request, "hugo");
  const tag = Date.now() % 100000;
  // A page that fails to show the end says what the server had then: a page left behind by its
  // job reads differently from a job that really stood still.
  const orSay = (id: string) => async (e: Error) => {
    throw new Error(`${e.message}\nthe API says job ${id} is ${await jobStatus(request, bearer, id)}`);
  };
  for (let i = 0; i < 6; i++) {
    const sub = await request.post("/api/v1/jobs", {
      headers: { Authorization: bearer },
      data: { image: "gpuq-test/busybox:latest", command: ["echo", `run ${i}`], min_vram_mb: 500, name: `racer-${tag}-${i}` },
    });
    expect(sub.status()).toBe(201);
    const id = (await sub.json()).job_id;
    await open(page, `/jobs/${id}`);
    await expect(page.locator("#job-status")).toHaveText("succeeded", { timeout: 15_000 }).catch(orSay(id));
    const next = await request.post("/api/v1/jobs", {
      headers: { Authorization: bearer },
      data: { image: "gpuq-test/busybox:latest", command: ["echo", `next ${i}`], min_vram_mb: 500, name: `racer-next-${tag}-${i}` },
    });
    const nextId = (await next.json()).job_id;
    await open(page, i % 2 === 0 ? "/jobs" : "/");
    const row = i % 2 === 0 ? page.locator("#jobs tr", { hasText: `racer-next-${tag}-${i}` }) : page.locator("#my-jobs tr", { hasText: `racer-next-${tag}-${i}` });
    // The queue lists it until it ends; the dashboard lists it while unfinished, then drops it.
    if (i % 2 === 0) {
      await expect(row.locator(".status")).toHaveText("succeeded", { timeout: 15_000 }).catch(orSay(nextId));
    } else {
      await expect(row).toHaveCount(0, { timeout: 15_000 }).catch(orSay(nextId));
    }
    await expect.poll(() => jobStatus(request, bearer, nextId)).toBe("succeeded");
  }
  expect(hydrationErrors).toEqual([]);
});

/** Signs `user` in and submits, as them, a one-card job running `script` in sh: its id and their bearer. */
async function signedInWithJob(page: Page, request: APIRequestContext, user: string, script: string) {
  await waitForServer(request);
  await ensureUser(request, user);
  await signIn(page, user);
  const bearer = await tokenFor(request, user);
  const sub = await request.post("/api/v1/jobs", {
    headers: { Authorization: bearer },
    data: { image: "gpuq-test/busybox:latest", command: ["sh", "-c", script], min_vram_mb: 500 },
  });
  expect(sub.status()).toBe(201);
  return { bearer, id: (await sub.json()).job_id as string };
}

// A route's code loads after the app's, and the live stream the app opens may be up before it:
// everything the stream said by then (its "refetch on open", the job's own events) reached no
// resource of the page. Here the job page's code is held back until the job has ended and the
// stream is open, so the page hydrates with the server's render of a job still under way and
// nothing more will be said of that job: it must still catch up by itself.
test("a page whose code loads after the live stream opened still catches up with its job", async ({ page, request }) => {
  const { bearer, id } = await signedInWithJob(page, request, "iris", "sleep 1; echo late");
  const streamOpen = page.waitForResponse((r) => r.url().includes("/api/v1/events"));
  let held = false;
  await page.route(/split___job_route_view_.*\.wasm$/, async (route) => {
    held = true;
    await streamOpen;
    await expect.poll(() => jobStatus(request, bearer, id), { timeout: 15_000 }).toBe("succeeded");
    await route.continue();
  });
  const response = await page.goto(`/jobs/${id}`);
  // The server rendered the job before it ended.
  expect(await response!.text()).not.toMatch(/id="job-status"[^>]*>succeeded</);
  await page.locator(`body[data-hydrated="/jobs/${id}"]`).waitFor({ state: "attached" });
  expect(held).toBe(true);
  await expect(page.locator("#job-status")).toHaveText("succeeded");
});

// A running job's log is fetched every second; an ended job's log is whole, and its page asks
// for it no more (every open page of an ended job used to cost a request a second, for ever).
test("the page of an ended job stops fetching its log", async ({ page, request }) => {
  const { id } = await signedInWithJob(page, request, "iris", "echo one; sleep 2; echo two");
  let logs = 0;
  let details = 0;
  page.on("request", (r) => {
    if (r.url().endsWith("/api/job_log")) logs++;
    if (r.url().endsWith("/api/job_detail")) details++;
  });
  await open(page, `/jobs/${id}`);
  // While it runs, the log is followed: "two" comes without a reload.
  await expect(page.locator("#log")).toContainText("two");
  await expect(page.locator("#job-status")).toHaveText("succeeded");
  await page.waitForTimeout(1_500);
  const [logsBefore, detailsBefore] = [logs, details];
  expect(logsBefore).toBeGreaterThan(0);
  await page.waitForTimeout(3_500);
  // A live event (another job of the queue moving, say) refetches the detail and the log together;
  // what must be gone is the once-a-second fetch of the log alone.
  expect(logs - logsBefore).toBe(details - detailsBefore);
});

test("an array is one row with its whole counts, and its owner cancels it as one", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "ariel");
  const ariel = await tokenFor(request, "ariel");
  const sub = await request.post("/api/v1/jobs", {
    headers: { Authorization: ariel },
    data: { image: "gpuq-test/busybox:latest", command: ["sleep", "30"], min_vram_mb: 1000, name: "sweep", array: "0-2%1" },
  });
  expect(sub.status()).toBe(201);
  await signIn(page, "ariel");
  await open(page, "/jobs");
  await page.getByLabel("Only mine").check();
  const row = page.locator("#jobs tbody tr.array", { hasText: "sweep (array)" });
  await expect(row).toHaveCount(1);
  // At most one at a time: the other two wait.
  await expect(row.locator("td.status")).toContainText("2 queued");
  await row.getByRole("button", { name: "Cancel array" }).click();
  await expect(row.locator("td.status")).toHaveText("3 cancelled", { timeout: 45_000 });
  await expect(row.getByRole("button", { name: "Cancel array" })).toHaveCount(0);
});

test("an array whose elements failed offers its owner Resubmit failed, which queues them again as a new array", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "ariel");
  const ariel = await tokenFor(request, "ariel");
  const sub = await request.post("/api/v1/jobs", {
    headers: { Authorization: ariel },
    data: { image: "gpuq-test/busybox:latest", command: ["false"], min_vram_mb: 1000, name: "flaky", array: "0-1" },
  });
  expect(sub.status()).toBe(201);
  await signIn(page, "ariel");
  await open(page, "/jobs");
  await page.getByLabel("Only mine").check();
  const rows = page.locator("#jobs tbody tr.array", { hasText: "flaky (array)" });
  await expect(rows).toHaveCount(1);
  await expect(rows.first().locator("td.status")).toHaveText("2 failed", { timeout: 45_000 });
  await rows.first().getByRole("button", { name: "Resubmit failed" }).click();
  await expect(rows).toHaveCount(2);
});

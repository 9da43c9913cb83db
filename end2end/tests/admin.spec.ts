import { test, expect, APIRequestContext } from "@playwright/test";
import { adminBearer, adminPassword, ensureUser, memberPassword, open, signIn, tokenFor, waitForServer } from "./util";

const MODEL = "NVIDIA GeForce RTX 3090";

async function setForeignMemory(request: APIRequestContext, bearer: string, mib: number) {
  const gpus = (await (await request.get("/api/v1/gpus", { headers: { Authorization: bearer } })).json()).gpus;
  for (const g of gpus) {
    const res = await request.put(`/api/v1/gpus/${g.uuid}/sim`, {
      headers: { Authorization: bearer },
      data: { external_mib: mib },
    });
    expect(res.status()).toBe(204);
  }
}

test("an admin edits the manifest in the grid and the change decides the next admission", async ({ page, request }) => {
  await waitForServer(request);
  const admin = await adminBearer(request);
  await ensureUser(request, "mona");
  const mona = await tokenFor(request, "mona");
  // Foreign processes hold most of both cards: 24576 − 20000 = 4576 MiB free on each.
  await setForeignMemory(request, admin, 20000);
  try {
    await signIn(page, "admin", adminPassword);
    await page.getByRole("link", { name: "Manifest", exact: true }).click();
    await expect(page.getByRole("heading", { name: "Manifest" })).toBeVisible();

    // Add a workload type that needs 8000 MiB on this model.
    await page.locator("#new-workload").fill("e2e-w");
    await page.getByLabel(`VRAM MiB for the new type on ${MODEL}`).fill("8000");
    await page.locator("#add-workload").click();
    const row = page.locator("tr[data-workload='e2e-w']");
    await expect(row).toBeVisible();
    await expect(page.locator("#manifest-status")).toContainText("applied by the admission pass");

    // A job of that type waits: it needs more than any card has free.
    const sub = await request.post("/api/v1/jobs", {
      headers: { Authorization: mona },
      data: { image: "gpuq-test/busybox:latest", command: ["true"], workload: "e2e-w", name: "manifest-decides" },
    });
    expect(sub.status()).toBe(201);
    const id = (await sub.json()).job_id;
    const job = async () => (await (await request.get(`/api/v1/jobs/${id}`, { headers: { Authorization: mona } })).json());
    await expect.poll(async () => (await job()).wait_reason ?? "", { timeout: 10_000 }).toContain("8000");
    expect((await job()).status).toBe("queued");

    // The admin lowers the need to 4000 MiB: the next pass admits the job. A live refetch while
    // the admin types (here: another admin's change to a card) keeps what was typed.
    const cell = row.getByLabel(`VRAM MiB for e2e-w on ${MODEL}`);
    await cell.fill("4000");
    const gpus = (await (await request.get("/api/v1/gpus", { headers: { Authorization: admin } })).json()).gpus;
    const refetched = page.waitForResponse((r) => r.url().endsWith("/api/manifest_state"));
    expect((await request.patch(`/api/v1/gpus/${gpus[0].uuid}`, { headers: { Authorization: admin }, data: { state: "online" } })).status()).toBe(204);
    await refetched;
    await expect(cell).toHaveValue("4000");
    await row.getByRole("button", { name: "Save" }).click();
    await expect(page.locator("#manifest-status")).toContainText("set to NVIDIA GeForce RTX 3090: 4000 MiB");
    await expect(page.locator("#manifest-status")).toContainText("applied by the admission pass");
    await expect.poll(async () => (await job()).status, { timeout: 20_000 }).not.toBe("queued");
    const admitted = await job();
    expect(admitted.assigned_gpus[0].vram_mib).toBe(4000);
    await expect(page.locator("#manifest-history li").first()).toContainText("e2e-w set to");
    await page.screenshot({ path: "screenshots/manifest.png", fullPage: true });

    // Bad input is refused with the reason, and nothing changes.
    await row.getByLabel(`VRAM MiB for e2e-w on ${MODEL}`).fill("-5");
    await row.getByRole("button", { name: "Save" }).click();
    await expect(page.getByRole("alert").first()).toContainText("between 1 and");

    // Rename, then delete (which asks once more). Let the job finish first: each of its live
    // events refetches the grid, and a refetch that lands between typing and clicking would put
    // the old name back into the box.
    await expect
      .poll(async () => (await job()).status, { timeout: 20_000 })
      .toMatch(/^(succeeded|failed|cancelled|timed_out)$/);
    const name = row.getByLabel("Name of e2e-w");
    await expect(async () => {
      await name.fill("e2e-w2");
      await expect(name).toHaveValue("e2e-w2", { timeout: 1_000 });
    }).toPass({ timeout: 10_000 });
    await row.getByRole("button", { name: "Rename" }).click();
    const renamed = page.locator("tr[data-workload='e2e-w2']");
    await expect(renamed).toBeVisible();
    await expect(page.locator("#manifest-history")).toContainText("renamed to e2e-w2");
    await renamed.getByRole("button", { name: "Delete" }).click();
    await renamed.getByRole("button", { name: "Really delete?" }).click();
    await expect(renamed).toHaveCount(0);
    await expect(page.locator("#manifest-history li").first()).toContainText("deleted");
  } finally {
    await setForeignMemory(request, admin, 0);
  }
});

test("an admin drains a card, manages users and the launch policy; a disabled user is out at once", async ({ page, browser, request }) => {
  await waitForServer(request);
  await ensureUser(request, "mel");
  await signIn(page, "admin", adminPassword);
  await page.getByRole("link", { name: "Admin", exact: true }).click();
  await expect(page.getByRole("heading", { name: "Admin" })).toBeVisible();

  // Drain GPU 1: the dashboard shows it, live.
  await page.getByLabel("State of GPU 1 on e2e").selectOption("draining");
  await page.getByRole("link", { name: "Dashboard", exact: true }).click();
  await expect(page.locator("article.gpu[data-gpu='1']")).toContainText("draining");
  await page.getByRole("link", { name: "Admin", exact: true }).click();
  await expect(page.getByLabel("State of GPU 1 on e2e")).toHaveValue("draining");
  await page.getByLabel("State of GPU 1 on e2e").selectOption("online");
  await page.getByRole("link", { name: "Dashboard", exact: true }).click();
  await expect(page.locator("article.gpu[data-gpu='1']")).toContainText("online");
  await page.getByRole("link", { name: "Admin", exact: true }).click();

  // Create a user through the form.
  const name = `newbie-${Date.now() % 100000}`;
  await page.getByLabel("Name").fill(name);
  await page.getByLabel("Role", { exact: true }).selectOption("member");
  await page.getByLabel("Initial password").fill(memberPassword);
  await page.getByRole("button", { name: "Create" }).click();
  await expect(page.getByText(`Created ${name} (member).`)).toBeVisible();
  const userRow = page.locator(`#users tr[data-user='${name}']`);
  await expect(userRow).toContainText("active");

  // The new user signs in elsewhere; the admin disables them; their next request is refused.
  const other = await browser.newContext();
  const theirs = await other.newPage();
  await signIn(theirs, name);
  await userRow.getByRole("button", { name: "Disable" }).click();
  await expect(userRow).toContainText("disabled");
  await theirs.goto("/");
  await expect(theirs).toHaveURL(/\/login$/);
  await other.close();

  // Promote mel to manager.
  await page.getByLabel("Role of mel").selectOption("manager");
  await expect(page.locator("#users tr[data-user='mel']")).toBeVisible();
  await expect.poll(async () => {
    const users = await (await request.get("/api/v1/users", { headers: { Authorization: await adminBearer(request) } })).json();
    return users.find((u: { username: string }) => u.username === "mel").role;
  }).toBe("manager");

  // The launch policy: a bad value names its field; a good one is saved.
  await page.getByLabel("Default timeout (s)").fill("999999999");
  await page.getByRole("button", { name: "Save policy" }).click();
  await expect(page.locator("#policy [role='alert']")).toContainText("default_timeout_s");
  await page.getByLabel("Default timeout (s)").fill("1800");
  // A job's /tmp is memory: it may not be larger than the memory limit.
  await expect(page.getByLabel("Read-only root filesystem", { exact: false })).toBeChecked();
  await page.getByLabel("/tmp per job (MiB, counts as memory)").fill("999999");
  await page.getByRole("button", { name: "Save policy" }).click();
  await expect(page.locator("#policy [role='alert']")).toContainText("tmp_mib");
  await page.getByLabel("/tmp per job (MiB, counts as memory)").fill("2048");
  await page.getByRole("button", { name: "Save policy" }).click();
  await expect(page.getByText("Saved. New jobs are checked against it from now on.")).toBeVisible();
  await page.screenshot({ path: "screenshots/admin.png", fullPage: true });
  const policy = await (await request.get("/api/v1/settings/launch-policy", { headers: { Authorization: await adminBearer(request) } })).json();
  expect(policy.default_timeout_s).toBe(1800);
  expect(policy.tmp_mib).toBe(2048);
  expect(policy.read_only_rootfs).toBe(true);
});

test("a member cannot reach the admin page", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "mona");
  await signIn(page, "mona");
  await expect(page.getByRole("link", { name: "Admin", exact: true })).toHaveCount(0);
  await page.goto("/admin");
  await expect(page.getByRole("alert")).toContainText("This page is for admins.");
  await expect(page.locator("#users")).toHaveCount(0);
});

test("a member changes their password, makes and revokes a token, and resubmits a job", async ({ page, request }) => {
  await waitForServer(request);
  const name = `tess-${Date.now() % 100000}`;
  await ensureUser(request, name);
  await signIn(page, name);
  await page.getByRole("link", { name: "Account", exact: true }).click();

  // A wrong current password is refused next to its field.
  await page.getByLabel("Current password").fill("not-my-password");
  await page.getByLabel("New password (at least 8 characters)").fill("brand-new-password");
  await page.getByRole("button", { name: "Change password" }).click();
  await expect(page.locator("#current-password-error")).toContainText("not correct");
  await page.getByLabel("Current password").fill(memberPassword);
  await page.getByRole("button", { name: "Change password" }).click();
  await expect(page.getByText("Password changed.")).toBeVisible();

  // A token, shown once, works until revoked.
  await page.getByLabel("Name", { exact: true }).fill("e2e-cli");
  await page.getByRole("button", { name: "Create token" }).click();
  const secret = (await page.locator("#new-token").textContent()) ?? "";
  expect(secret.length).toBeGreaterThan(20);
  const me = async () => (await request.get("/api/v1/me", { headers: { Authorization: `Bearer ${secret}` } })).status();
  expect(await me()).toBe(200);
  const tokenRow = page.locator("#tokens tr[data-token='e2e-cli']");
  await expect(tokenRow).toContainText("live");
  await page.screenshot({ path: "screenshots/account.png", fullPage: true });
  await tokenRow.getByRole("button", { name: "Revoke" }).click();
  await expect(tokenRow).toContainText("revoked");
  expect(await me()).toBe(401);

  // The new password is the one that works now.
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/login$/);
  await signIn(page, name, "brand-new-password");

  // Resubmit: a job's page makes a new job with the same spec.
  const bearer = await tokenFor(request, name, "brand-new-password");
  const sub = await request.post("/api/v1/jobs", {
    headers: { Authorization: bearer },
    data: { image: "gpuq-test/busybox:latest", command: ["echo", "again"], min_vram_mb: 500, name: "twice" },
  });
  expect(sub.status()).toBe(201);
  const first = (await sub.json()).job_id;
  await open(page, `/jobs/${first}`);
  await expect(page.locator("#job-status")).toHaveText("succeeded", { timeout: 30_000 });
  await page.getByRole("button", { name: "Resubmit as new job" }).click();
  await expect(page).not.toHaveURL(new RegExp(first));
  await expect(page).toHaveURL(/\/jobs\/[0-9a-f-]{36}$/);
  await expect(page.locator(".timeline li[data-kind='resubmitted_from']")).toBeVisible();
  await expect(page.locator("#job-status")).toHaveText("succeeded", { timeout: 30_000 });
  await expect(page.locator("#log")).toContainText("again");
});

import { test, expect } from "@playwright/test";
import { adminBearer, ensureUser, open, signIn, tokenFor, waitForServer } from "./util";

// Observed VRAM on simulated cards: an admin gives a running job usage through the API (as a
// driver would report it on a real card), and the member sees used against committed on the
// dashboard's card and on the job's page, then the over-commitment badge once it stays above.
test("the dashboard and the job page show used against committed, and an overrun is flagged", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "vera");
  const vera = await tokenFor(request, "vera");
  const admin = await adminBearer(request);
  const submitted = await request.post("/api/v1/jobs", {
    headers: { Authorization: vera },
    data: { image: "gpuq-test/busybox:latest", command: ["sleep", "60"], min_vram_mb: 1000, name: "vram-shown" },
  });
  expect(submitted.status()).toBe(201);
  const id = (await submitted.json()).job_id as string;
  let job: any;
  await expect(async () => {
    job = await (await request.get(`/api/v1/jobs/${id}`, { headers: { Authorization: vera } })).json();
    expect(job.status).toBe("running");
  }).toPass({ timeout: 30_000 });
  const card = job.assigned_gpus[0];

  // Within its commitment first.
  const within = await request.put(`/api/v1/gpus/${card.uuid}/sim`, {
    headers: { Authorization: admin },
    data: { job_used_mib: { [id]: 700 } },
  });
  expect(within.status()).toBe(204);
  await signIn(page, "vera");
  const article = page.locator(`article.gpu[data-gpu='${card.index}']`);
  await expect(async () => {
    await page.reload();
    await expect(article.locator(".used-legend")).toContainText("in use 700 MiB (observed)", { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  await expect(article.locator(".holders")).toContainText("vram-shown · vera · 1000 MiB (uses 700 MiB)");

  // Then above it, on a card with room to spare: warned (a badge and a line), not stopped.
  const over = await request.put(`/api/v1/gpus/${card.uuid}/sim`, {
    headers: { Authorization: admin },
    data: { job_used_mib: { [id]: 3000 } },
  });
  expect(over.status()).toBe(204);
  await open(page, `/jobs/${id}`);
  await expect(page.locator("#vram-over")).toContainText("used more VRAM than it declared", { timeout: 20_000 });
  await expect(page.locator("#job-vram")).toContainText("3000 MiB now, peak 3000 MiB, of 1000 MiB committed");
  await expect(page.locator(".timeline li[data-kind='vram_over_commitment']")).toBeVisible();
  await expect(page.locator("#job-status")).toHaveText("running");
  await page.screenshot({ path: "screenshots/job-vram-over.png", fullPage: true });

  const cancelled = await request.post(`/api/v1/jobs/${id}/cancel`, { headers: { Authorization: vera } });
  expect(cancelled.status()).toBe(200);
});

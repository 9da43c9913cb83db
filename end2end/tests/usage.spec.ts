import { test, expect } from "@playwright/test";
import { ensureUser, signIn, tokenFor, waitForServer, jobStatus } from "./util";
import { readFile } from "node:fs/promises";

test("a manager opens the usage charts, reads the tables and downloads the CSV", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "manny", "manager");
  const manny = await tokenFor(request, "manny");
  // One job that is admitted, runs and ends, so every chart has something to show. It holds its
  // 2000 MiB longer than the sampler's 5 s period, so at least one sample sees the reservation.
  const submitted = await request.post("/api/v1/jobs", {
    headers: { Authorization: manny },
    data: { image: "gpuq-test/busybox:latest", command: ["sleep", "6"], min_vram_mb: 2000, name: "usage-e2e" },
  });
  expect(submitted.status()).toBe(201);
  const id = (await submitted.json()).job_id;
  await expect
    .poll(
      () => jobStatus(request, manny, id),
      { timeout: 30_000 },
    )
    .toBe("succeeded");

  await signIn(page, "manny");
  // Arrive through the menu (a client-side navigation), so the chart script loads that way too.
  await page.getByRole("link", { name: "Usage", exact: true }).click();
  await expect(page.getByRole("heading", { name: "Usage", exact: true })).toBeVisible();
  await expect(page.getByRole("button", { name: "Last 24 hours" })).toHaveAttribute("aria-pressed", "true");

  // Every chart container gets an ECharts canvas: one per card, the waits, and the two totals.
  const cards = page.locator(".usage-card");
  await expect(cards).toHaveCount(2);
  const charts = page.locator(".usage .chart");
  await expect(charts).toHaveCount(5);
  for (let i = 0; i < 5; i++) {
    await expect(charts.nth(i).locator("canvas").first()).toBeVisible();
  }

  // The numbers are readable without the charts.
  await expect(cards.first().locator(".usage-summary tbody td").first()).toHaveText(/^[1-9]\d*$/);
  // Peak reserved (raw samples): at least the job's 2000 MiB on the card it ran on (earlier tests
  // on the same server may have reserved more).
  const peaks = await page.locator(".usage-summary tbody td:nth-child(3)").allInnerTexts();
  expect(Math.max(...peaks.map((t) => parseInt(t, 10)))).toBeGreaterThanOrEqual(2000);
  await expect(page.locator("#usage-wait-summary")).toContainText("admitted · median wait");
  await expect(page.locator("#usage-waits tbody tr")).toHaveCount(6);
  const owner = page.locator("#usage-users tbody tr", { hasText: "manny" });
  await expect(owner).toHaveCount(1);
  await expect(owner.locator("td").nth(2)).toHaveText(/^0\.\d{4}$/);
  await expect(page.locator("#usage-workloads")).toContainText("(custom VRAM)");
  // Fair share: each user's and team's decayed GPU-hours, shares and budget; what idle reclaim
  // took back.
  await expect(page.getByRole("heading", { name: "Fair share" })).toBeVisible();
  await expect(page.locator("#fair-share-state")).toContainText("A GPU-hour counts half after 168 h");
  const mine = page.locator("#fair-share-users tbody tr[data-name='manny']");
  await expect(mine.locator("td").nth(1)).toHaveText("default");
  await expect(mine.locator("td").nth(3)).toHaveText(/^\d+\.\d{2}$/);
  await expect(mine.locator("td").nth(6)).toHaveText("none");
  await expect(page.locator("#fair-share-teams tbody tr[data-name='default']")).toHaveCount(1);
  await expect(page.locator("#usage-reclaimed")).toBeVisible();

  // The tooltip answers a hover on a card chart.
  const first = charts.first();
  const box = await first.boundingBox();
  if (!box) throw new Error("chart has no box");
  await page.mouse.move(box.x + box.width * 0.9, box.y + box.height * 0.4);
  await expect(first.locator("div").filter({ hasText: "reserved" }).last()).toBeVisible();

  // Another range redraws in place.
  await page.getByRole("button", { name: "Last hour" }).click();
  await expect(page.getByRole("button", { name: "Last hour" })).toHaveAttribute("aria-pressed", "true");
  await expect(page.locator("#usage-span")).toContainText("points average");
  await expect(charts.first().locator("canvas").first()).toBeVisible();
  await page.screenshot({ path: "screenshots/usage.png", fullPage: true });

  // CSV: a file with the header and one row per sample.
  const download = page.waitForEvent("download");
  await page.locator("#csv-samples").click();
  const file = await download;
  expect(file.suggestedFilename()).toMatch(/^gpu-samples-.*\.csv$/);
  const path = await file.path();
  const lines = (await readFile(path, "utf8")).trim().split("\n");
  expect(lines[0]).toBe("at,node,gpu_uuid,gpu_index,model,total_mib,reserved_mib,used_mib,external_mib,utilization_pct");
  expect(lines.length).toBeGreaterThan(1);
  expect(lines[1]).toContain("NVIDIA GeForce RTX 3090");
});

test("a member is refused the usage page and its API", async ({ page, request }) => {
  await waitForServer(request);
  await ensureUser(request, "milo", "member");
  await signIn(page, "milo");
  await page.goto("/usage");
  await expect(page.locator("#usage-refused")).toContainText("managers and admins only");
  await expect(page.locator(".usage .chart")).toHaveCount(0);
  const milo = await tokenFor(request, "milo");
  const api = await request.get("/api/v1/usage", { headers: { Authorization: milo } });
  expect(api.status()).toBe(403);
  const csv = await request.get("/api/v1/usage/samples.csv", { headers: { Authorization: milo } });
  expect(csv.status()).toBe(403);
});

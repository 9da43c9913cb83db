// The learning manifest in the editor: finished jobs' observed peaks beside the declared figure,
// and an admin applying the suggestion with one click (an ordinary, audited manifest edit).
//
// The e2e server's cards are simulated and nothing samples per-job VRAM on them here, so the
// jobs run for real through the API and their `job_vram` records (what the sampler writes) are
// inserted with psql into the server's database (`GPUQ_E2E_DATABASE_URL`, set by scripts/test.sh).
import { test, expect } from "@playwright/test";
import { execFileSync } from "node:child_process";
import { adminBearer, adminPassword, open, signIn, waitForServer, jobStatus } from "./util";

const MODEL = "NVIDIA GeForce RTX 3090";
const WORKLOAD = "e2e-learn";

test("the manifest editor shows observed peaks and applies the suggestion", async ({ page, request }) => {
  const db = process.env.GPUQ_E2E_DATABASE_URL;
  test.skip(!db, "GPUQ_E2E_DATABASE_URL is not set: the peaks cannot be recorded");
  await waitForServer(request);
  const admin = await adminBearer(request);
  const headers = { Authorization: admin };
  const put = await request.put(`/api/v1/manifest/${WORKLOAD}`, { headers, data: { vram_mib: { [MODEL]: 8000 } } });
  expect(put.status()).toBe(200);

  // Three jobs of the type run to the end.
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const sub = await request.post("/api/v1/jobs", {
      headers,
      data: { image: "gpuq-test/busybox:latest", command: ["true"], workload: WORKLOAD, name: `learn-${i}` },
    });
    expect(sub.status()).toBe(201);
    ids.push((await sub.json()).job_id);
  }
  for (const id of ids) {
    await expect
      .poll(() => jobStatus(request, admin, id), { timeout: 30_000 })
      .toBe("succeeded");
  }
  // What the sampler would have recorded: peaks of 6000, 7000 and 7500 MiB on their card.
  const peaks = [6000, 7000, 7500];
  const values = ids
    .map((id, i) => `('${id}'::uuid, ${peaks[i]})`)
    .join(", ");
  execFileSync("psql", [db!, "-v", "ON_ERROR_STOP=1", "-qc",
    `INSERT INTO job_vram (job_id, gpu_uuid, committed_mib, used_mib, peak_mib, sampled_at)
     SELECT v.id, r.gpu_uuid, r.vram_mib, 0, v.peak, now()
     FROM (VALUES ${values}) AS v (id, peak)
     JOIN LATERAL (SELECT gpu_uuid, vram_mib FROM reservations WHERE job_id = v.id LIMIT 1) r ON true`]);

  await signIn(page, "admin", adminPassword);
  await open(page, "/manifest");
  const learned = page.locator(`#manifest-suggestions tr[data-workload='${WORKLOAD}'][data-model='${MODEL}']`);
  await expect(learned).toBeVisible();
  await expect(learned.locator(".declared")).toHaveText("8000");
  await expect(learned.locator(".n")).toHaveText("3");
  // p95 = 7500; 7500 × 1.10 = 8250 → rounded up to 33 × 256 = 8448.
  await expect(learned.locator(".suggested")).toHaveText("8448 MiB");
  await page.screenshot({ path: "screenshots/manifest-suggestions.png", fullPage: true });

  await learned.getByRole("button", { name: "Use suggestion (8448 MiB)" }).click();
  const cell = page.locator(`tr[data-workload='${WORKLOAD}']`).getByLabel(`VRAM MiB for ${WORKLOAD} on ${MODEL}`);
  await expect(cell).toHaveValue("8448");
  await expect(learned.locator(".declared")).toHaveText("8448");
  await expect(learned.getByRole("button")).toHaveCount(0);
  await expect(page.locator("#manifest-history li").first()).toContainText(`${WORKLOAD} set to`);
  await expect(page.locator("#manifest-history li").first()).toContainText("8448");
});

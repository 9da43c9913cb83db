// The browser bundle served from inside the binary: scripts/test.sh starts the e2e server in an
// empty temporary folder and without --site-root (GPUQ_E2E_SITE=embedded says so), so every page
// of every spec loads its JS and WASM from the bundle gpuq carries. This spec checks how the files
// are answered, and that a page served that way hydrates.
import { test, expect } from "@playwright/test";
import { adminPassword, signIn, waitForServer } from "./util";

test.beforeAll(() => {
  expect(process.env.GPUQ_E2E_SITE, "the e2e server must run without --site-root, outside the checkout").toBe("embedded");
});

test("the bundle's files come with their type, an ETag and the security headers", async ({ request }) => {
  await waitForServer(request);
  for (const [path, type] of [
    ["/pkg/gpuq.wasm", "application/wasm"],
    ["/pkg/gpuq.js", "text/javascript"],
    ["/pkg/gpuq.css", "text/css"],
  ]) {
    const res = await request.get(path);
    expect(res.status(), path).toBe(200);
    expect(res.headers()["content-type"], path).toBe(type);
    expect(res.headers()["cache-control"], path).toBe("no-cache");
    expect(res.headers()["x-content-type-options"], path).toBe("nosniff");
    expect(res.headers()["content-security-policy"], path).toContain("default-src 'self'");
    const etag = res.headers()["etag"];
    expect(etag, path).toMatch(/^"[0-9a-f]{64}"$/);
    // Unchanged: the browser revalidates and gets no body.
    const again = await request.get(path, { headers: { "If-None-Match": etag } });
    expect(again.status(), path).toBe(304);
  }
  // A path that is no file, or that climbs out of the bundle, is the pages' 404.
  for (const path of ["/pkg/nope.wasm", "/pkg/../Cargo.toml", "/pkg/%2e%2e/Cargo.toml"]) {
    const res = await request.get(path);
    expect(res.status(), path).toBe(404);
    expect(res.headers()["content-type"], path).toContain("text/html");
  }
});

test("a page served from the embedded bundle hydrates, and a lazy page preloads its chunks", async ({ page }) => {
  await waitForServer(page.request);
  await signIn(page, "admin", adminPassword);
  // Only the running WASM bundle can answer this button.
  await expect(page.locator("#status-result")).toHaveText("Not checked yet.");
  await page.getByRole("button", { name: "Check now" }).click();
  await expect(page.locator("#status-result")).toContainText("Database: ok");

  // The split manifest comes from the bundle too: the server names the lazy route's chunks.
  const html = await (await page.request.get("/submit")).text();
  expect(html).toContain('rel="modulepreload"');
  expect(html).toMatch(/rel="preload" href="\/pkg\/[^"]+\.wasm"/);
  await page.getByRole("link", { name: "Submit", exact: true }).click();
  await expect(page.getByRole("heading", { name: "Submit a job" })).toBeVisible();
});

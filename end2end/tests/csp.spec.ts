import { test, expect, Page } from "@playwright/test";
import { adminBearer, adminPassword, signIn, waitForServer } from "./util";

// Every page runs under the Content-Security-Policy (scripts only from this origin or with the
// response's nonce): none of them may log a violation. Anything the policy blocks is a bug either in
// the policy or in the page.

// Collects violations both ways a browser reports them: the DOM event and the console message.
async function watchForViolations(page: Page): Promise<string[]> {
  const seen: string[] = [];
  await page.exposeFunction("__cspViolation", (text: string) => seen.push(text));
  await page.addInitScript(() => {
    document.addEventListener("securitypolicyviolation", (e) => {
      // @ts-expect-error: exposed above
      window.__cspViolation(`${e.violatedDirective} blocked ${e.blockedURI} (${e.sourceFile}:${e.lineNumber})`);
    });
  });
  page.on("console", (msg) => {
    const text = msg.text();
    if (/Content.Security.Policy/i.test(text)) seen.push(`console ${msg.type()}: ${text}`);
  });
  page.on("pageerror", (err) => {
    if (/Content.Security.Policy/i.test(err.message)) seen.push(`page error: ${err.message}`);
  });
  return seen;
}

test("no page logs a CSP violation", async ({ page, request }) => {
  await waitForServer(request);
  const violations = await watchForViolations(page);

  // A job, so its page can be visited too.
  const sub = await request.post("/api/v1/jobs", {
    headers: { Authorization: await adminBearer(request) },
    data: { image: "gpuq-test/busybox:latest", command: ["echo", "csp"], min_vram_mb: 500, name: "csp-check" },
  });
  expect(sub.status()).toBe(201);
  const jobId = (await sub.json()).job_id;

  // Checks after each page has loaded and settled, so a blocked script is reported by name (and
  // not only as a page that never hydrates).
  const settle = async (path: string) => {
    await page.waitForLoadState("networkidle");
    expect(violations, `CSP violations on ${path}`).toEqual([]);
    await page.locator(`body[data-hydrated="${new URL(page.url()).pathname}"]`).waitFor({ state: "attached" });
  };

  const res = await page.goto("/login");
  const csp = res?.headers()["content-security-policy"] ?? "";
  expect(csp).toContain("'nonce-");
  expect(csp).toContain("frame-ancestors 'none'");
  await settle("/login");

  await signIn(page, "admin", adminPassword);
  for (const path of ["/", "/jobs", `/jobs/${jobId}`, "/submit", "/manifest", "/usage", "/admin", "/account"]) {
    await page.goto(path);
    await settle(path);
  }
  // Client-side navigation loads the lazy routes' code too.
  await page.goto("/");
  await settle("/");
  await page.getByRole("link", { name: "Jobs", exact: true }).click();
  await expect(page).toHaveURL(/\/jobs$/);
  await page.getByRole("link", { name: "Manifest", exact: true }).click();
  await expect(page).toHaveURL(/\/manifest$/);
  await settle("/manifest");

  expect(violations).toEqual([]);
});

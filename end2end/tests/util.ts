// Shared steps of the browser tests: the server is started by the test command just before they
// run; accounts are made through the REST API as an admin would.
import { expect, Page, APIRequestContext } from "@playwright/test";

export const adminPassword = process.env.GPUQ_E2E_ADMIN_PASSWORD ?? "e2e-admin-password";
export const memberPassword = "member-password-1";

export async function waitForServer(request: APIRequestContext) {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      const res = await request.get("/readyz");
      if (res.ok()) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error("gpuq did not become ready within 60 s");
    await new Promise((r) => setTimeout(r, 250));
  }
}

export async function adminBearer(request: APIRequestContext): Promise<string> {
  const token = await request.post("/api/v1/tokens", {
    data: { username: "admin", password: adminPassword, name: `e2e-admin-${Date.now()}` },
  });
  expect(token.status()).toBe(201);
  return `Bearer ${(await token.json()).token}`;
}

// A user with `memberPassword` (created once; later calls find it there).
export async function ensureUser(request: APIRequestContext, name: string, role = "member") {
  const created = await request.post("/api/v1/users", {
    headers: { Authorization: await adminBearer(request) },
    data: { username: name, role, password: memberPassword },
  });
  expect([201, 409]).toContain(created.status());
}

export async function tokenFor(request: APIRequestContext, name: string, password = memberPassword): Promise<string> {
  const res = await request.post("/api/v1/tokens", {
    data: { username: name, password, name: `e2e-${name}-${Date.now()}` },
  });
  expect(res.status()).toBe(201);
  return `Bearer ${(await res.json()).token}`;
}

/** The status of job `id`, as its owner (or an admin) with `bearer` reads it through the API. */
export async function jobStatus(request: APIRequestContext, bearer: string, id: string): Promise<string> {
  return (await (await request.get(`/api/v1/jobs/${id}`, { headers: { Authorization: bearer } })).json()).status;
}

export async function signIn(page: Page, name: string, password = memberPassword) {
  await page.goto("/login");
  await page.getByLabel("Username").fill(name);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: `Welcome, ${name}` })).toBeVisible();
}

// Opens a page and waits until the browser has hydrated it (keystrokes before that reach no handler).
export async function open(page: Page, path: string) {
  await page.goto(path);
  await page.locator(`body[data-hydrated="${path}"]`).waitFor({ state: "attached" });
}

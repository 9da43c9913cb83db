import { test, expect } from "@playwright/test";
import { adminPassword, waitForServer } from "./util";

test("sign in, see the dashboard, use a hydrated control, sign out", async ({ page }) => {
  await waitForServer(page.request);

  // A stranger is sent to the sign-in page.
  await page.goto("/");
  await expect(page).toHaveURL(/\/login$/);
  await expect(page.getByRole("heading", { name: "Sign in" })).toBeVisible();
  // Typed before hydration, the form would post as a plain form (tested below, without JS).
  await page.locator('body[data-hydrated="/login"]').waitFor({ state: "attached" });

  // A wrong password is refused with a message, and we stay on the page.
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill("wrong password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("alert")).toContainText("wrong username or password");
  await expect(page).toHaveURL(/\/login$/);

  await page.getByLabel("Password").fill(adminPassword);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/$/);
  await expect(page.getByRole("heading", { name: "Welcome, admin" })).toBeVisible();
  await expect(page.locator(".who")).toContainText("admin");
  await page.screenshot({ path: "screenshots/dashboard.png", fullPage: true });

  // Only the running WASM bundle can answer this button: it proves hydration.
  await expect(page.locator("#status-result")).toHaveText("Not checked yet.");
  await page.getByRole("button", { name: "Check now" }).click();
  await expect(page.locator("#status-result")).toContainText("Database: ok");

  // Admins reach the users list on the admin page, filled by a role-checked server function.
  await page.getByRole("link", { name: "Admin", exact: true }).click();
  await expect(page.locator("#users tr[data-user='admin']")).toContainText("admin (you)");

  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/login$/);
  await page.goto("/");
  await expect(page).toHaveURL(/\/login$/);
});

test("a cross-site form post is refused", async ({ page, request }) => {
  await waitForServer(page.request);
  const res = await request.post("/api/logout", {
    headers: { Origin: "http://evil.example", "Content-Type": "application/x-www-form-urlencoded" },
    data: "",
  });
  expect(res.status()).toBe(403);
  expect((await res.json()).kind).toBe("cross_site");
});

test("a stranger is sent to sign in and comes back to the page asked for", async ({ page }) => {
  await waitForServer(page.request);
  const res = await page.request.get("/jobs?status=queued", { maxRedirects: 0 });
  expect(res.status()).toBe(303);
  expect(res.headers()["location"]).toBe("/login?next=/jobs%3Fstatus%3Dqueued");

  await page.goto("/jobs?status=queued");
  await expect(page).toHaveURL(/\/login\?next=/);
  await page.locator('body[data-hydrated="/login"]').waitFor({ state: "attached" });
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill(adminPassword);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/jobs\?status=queued$/);

  // A `next` that leads off-site is ignored.
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/login$/);
  await page.goto("/login?next=//evil.example/");
  await page.locator('body[data-hydrated="/login"]').waitFor({ state: "attached" });
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill(adminPassword);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Welcome, admin" })).toBeVisible();
  expect(page.url()).not.toContain("evil");
});

// A refusal travels in the URL when a form posts without the WASM bundle; anyone can write such
// a link, so the page must never show words taken from it.
function forgedRefusal(next = ""): string {
  const json = JSON.stringify({ kind: "unavailable", detail: "Your account is locked: call 555-0100" });
  const err = Buffer.from(json).toString("base64").replace(/\+/g, "-").replace(/\//g, "_");
  const query = next ? `next=${encodeURIComponent(next)}&` : "";
  return `/login?${query}__path=%2Fapi%2Flogin&__err=${encodeURIComponent(err)}`;
}

test("a forged refusal in a link puts no words of its own on the sign-in page", async ({ page }) => {
  await waitForServer(page.request);
  await page.goto(forgedRefusal("/jobs"));
  await page.locator('body[data-hydrated="/login"]').waitFor({ state: "attached" });
  await expect(page.getByRole("alert")).toContainText("send the form again with JavaScript on");
  await expect(page.locator("body")).not.toContainText("555-0100");
  expect(page.url()).toContain("next=%2Fjobs");
  expect(decodeURIComponent(page.url())).not.toContain("555-0100");
});

test.describe("without JavaScript", () => {
  test.use({ javaScriptEnabled: false });

  test("the sign-in form still refuses a wrong password with a message, and signs in", async ({ page }) => {
    await waitForServer(page.request);
    await page.goto("/login");
    await page.getByLabel("Username").fill("admin");
    await page.getByLabel("Password").fill("wrong password");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect(page).toHaveURL(/\/login(\?|$)/);
    await expect(page.getByRole("alert")).toContainText("wrong username or password");

    await page.getByLabel("Username").fill("admin");
    await page.getByLabel("Password").fill(adminPassword);
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect(page).toHaveURL(/\/$/);
    await expect(page.getByRole("heading", { name: "Welcome, admin" })).toBeVisible();
  });

  test("a forged refusal in a link puts no words of its own on the page", async ({ page }) => {
    await waitForServer(page.request);
    await page.goto(forgedRefusal());
    await expect(page.getByRole("alert")).toContainText("send the form again with JavaScript on");
    await expect(page.locator("body")).not.toContainText("555-0100");
  });
});

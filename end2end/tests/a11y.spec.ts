import { test, expect, Page } from "@playwright/test";
import AxeBuilder from "@axe-core/playwright";
import { adminPassword, open, signIn, waitForServer } from "./util";

// Every page, checked by axe-core against WCAG 2.1 A and AA (labels, names, contrast, landmarks,
// keyboard-reachable controls). Any violation fails, with its rule, impact and elements.
async function audit(page: Page, path: string) {
  await open(page, path);
  await page.waitForLoadState("networkidle");
  const results = await new AxeBuilder({ page })
    .withTags(["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"])
    .analyze();
  const found = results.violations.map(
    (v) => `${path}: ${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`,
  );
  expect(found, found.join("\n")).toEqual([]);
}

test("every page passes an automated WCAG 2.1 AA check", async ({ page, request }) => {
  await waitForServer(request);
  await audit(page, "/login");
  await signIn(page, "admin", adminPassword);
  for (const path of ["/", "/submit", "/jobs", "/manifest", "/usage", "/admin", "/account"]) {
    await audit(page, path);
  }
});

test("the main controls work from the keyboard alone", async ({ page, request }) => {
  await waitForServer(request);
  await page.goto("/login");
  // The first Tab reaches the skip link, which jumps past the navigation.
  await page.keyboard.press("Tab");
  await expect(page.getByRole("link", { name: "Skip to content" })).toBeFocused();
  await page.getByLabel("Username").focus();
  await page.keyboard.type("admin");
  await page.keyboard.press("Tab");
  await page.keyboard.type(adminPassword);
  await page.keyboard.press("Enter");
  await expect(page.getByRole("heading", { name: "Welcome, admin" })).toBeVisible();
  await page.goto("/jobs");
  await page.getByLabel("Status").focus();
  await page.keyboard.press("Tab");
  await expect(page.getByLabel("Owner")).toBeFocused();
});

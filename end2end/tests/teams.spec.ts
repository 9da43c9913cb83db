import { test, expect } from "@playwright/test";
import { adminBearer, adminPassword, ensureUser, open, signIn, waitForServer } from "./util";

test("an admin creates a team, sets its weight and budget and moves a user into it", async ({ page, request }) => {
  await waitForServer(request);
  const admin = await adminBearer(request);
  await ensureUser(request, "tess");
  const team = `e2e-${Date.now().toString(36)}`;
  await signIn(page, "admin", adminPassword);
  await open(page, "/admin");
  await expect(page.getByRole("heading", { name: "Teams" })).toBeVisible();

  // Add the team with a weight and a budget.
  await page.locator("#new-team-name").fill(team);
  await page.locator("#new-team-weight").fill("2");
  await page.locator("#new-team-budget").fill("50/week/hard");
  await page.getByRole("button", { name: "Add team" }).click();
  const row = page.locator(`tr[data-team='${team}']`);
  await expect(row).toBeVisible();
  await expect(row.getByLabel(`Weight of team ${team}`)).toHaveValue("2");
  await expect(row.getByLabel(`Budget of team ${team}`)).toHaveValue("50/week/hard");

  // Change its weight and budget; a bad budget is refused naming the field.
  await row.getByLabel(`Budget of team ${team}`).fill("50/day/hard");
  await row.getByRole("button", { name: `Save ${team}` }).click();
  await expect(row.getByRole("alert")).toContainText("budget:");
  await row.getByLabel(`Weight of team ${team}`).fill("3");
  await row.getByLabel(`Budget of team ${team}`).fill("20/month/soft");
  await row.getByRole("button", { name: `Save ${team}` }).click();
  const teamOf = async () =>
    (await (await request.get("/api/v1/teams", { headers: { Authorization: admin } })).json()).find(
      (t: { name: string }) => t.name === team,
    );
  await expect.poll(async () => (await teamOf())?.weight).toBe(3);
  expect((await teamOf()).budget).toEqual({ gpu_hours: 20, period: "month", kind: "soft" });

  // Move tess into it with a weight of her own.
  const user = page.locator("tr[data-user='tess']");
  await user.getByLabel("Team of tess").fill(team);
  await user.getByLabel("Weight of tess").fill("0.5");
  await user.getByRole("button", { name: "Save share of tess" }).click();
  await expect.poll(async () => (await teamOf())?.members ?? []).toContain("tess");
  await expect(page.locator(`tr[data-team='${team}']`)).toContainText("tess");
  const users = await (await request.get("/api/v1/users", { headers: { Authorization: admin } })).json();
  const tess = users.find((u: { username: string }) => u.username === "tess");
  expect([tess.team, tess.weight]).toEqual([team, 0.5]);
});

import { test, expect } from "@playwright/test";
import { adminBearer, adminPassword, signIn, waitForServer } from "./util";

test("a change made while the page was cut off shows once the stream reconnects", async ({ page, context, request }) => {
  await waitForServer(request);
  const admin = await adminBearer(request);
  const gpus = (await (await request.get("/api/v1/gpus", { headers: { Authorization: admin } })).json()).gpus;
  const card = gpus[0];
  const setState = async (state: string) => {
    const res = await request.patch(`/api/v1/gpus/${card.uuid}`, {
      headers: { Authorization: admin },
      data: { state },
    });
    expect(res.status()).toBe(204);
  };
  await signIn(page, "admin", adminPassword);
  const shown = page.locator(`article.gpu[data-gpu='${card.index}'] p.muted`);
  await expect(shown).toContainText("online");

  // Live while connected: the change shows without a reload.
  await setState("draining");
  await expect(shown).toContainText("draining");

  // Cut the page off the network, change the card meanwhile, then reconnect.
  await context.setOffline(true);
  await page.waitForTimeout(1500);
  await setState("online");
  await page.waitForTimeout(1500);
  await context.setOffline(false);
  await expect(shown).toContainText("online", { timeout: 20_000 });

  // And the stream carries on after the reconnect.
  await setState("draining");
  await expect(shown).toContainText("draining");
  await setState("online");
  await expect(shown).toContainText("online");
});

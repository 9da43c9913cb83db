import { request } from "@playwright/test";

// Chromium fails every request in flight with net::ERR_NETWORK_CHANGED when a host network link
// goes up or down, and each job container on a bridge brings a veth pair (and the bridge itself)
// up and down on this very host. A job that starts while a page fetches its WASM chunks could
// then abort the page's hydration. The browser tests are not about job networking (the Rust
// isolation tests are), so their jobs run with the launch policy's `network: none`: no links move.
export default async function globalSetup() {
  const baseURL = process.env.GPUQ_E2E_URL ?? "http://127.0.0.1:3000";
  const password = process.env.GPUQ_E2E_ADMIN_PASSWORD ?? "e2e-admin-password";
  const api = await request.newContext({ baseURL });
  const deadline = Date.now() + 60_000;
  for (;;) {
    const ok = await api.get("/healthz").then((r) => r.ok()).catch(() => false);
    if (ok) break;
    if (Date.now() > deadline) throw new Error("gpuq did not answer /healthz within 60 s");
    await new Promise((r) => setTimeout(r, 250));
  }
  const token = await api.post("/api/v1/tokens", {
    data: { username: "admin", password, name: `e2e-setup-${Date.now()}` },
  });
  if (token.status() !== 201) throw new Error(`admin token: ${token.status()} ${await token.text()}`);
  const headers = { Authorization: `Bearer ${(await token.json()).token}` };
  const policy = await (await api.get("/api/v1/settings/launch-policy", { headers })).json();
  const saved = await api.put("/api/v1/settings/launch-policy", { headers, data: { ...policy, network: "none" } });
  if (saved.status() !== 200) throw new Error(`launch policy: ${saved.status()} ${await saved.text()}`);
  await api.dispose();
}

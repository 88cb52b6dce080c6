// With auth on, the console asks for a token once (the login form), keeps it
// in an HttpOnly, SameSite=Strict session cookie, never shows it again, and
// stops letting the person in the moment the token is revoked.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { api, clean, launch, open, seed, shot, startService, stopService } from "./harness.mjs";

const BOOT = `bootstrap-${randomBytes(16).toString("hex")}`;
const ADMIN = { authorization: `Bearer ${BOOT}` };

let service;
let browser;
let reader; // a read-only token's secret

before(async () => {
  service = await startService({ BATCHGATE_AUTH: "required", BATCHGATE_BOOTSTRAP_TOKEN: BOOT });
  await seed(service.base, ADMIN);
  const made = await api(service.base, "POST", "/v1/tokens", { name: "console-reader", scopes: ["read"] }, 201, ADMIN);
  reader = made.token;
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await stopService(service);
});

test("with auth on, the console asks for a token once and keeps a session cookie", async () => {
  const { page, resp, seen, ctx } = await open(browser, service.base, "/ui/datasets/ods.orders");
  // No session: the login form, remembering where the person was going.
  assert.equal(resp.status(), 200);
  assert.equal(new URL(page.url()).pathname, "/ui/login");
  assert.equal(new URL(page.url()).searchParams.get("next"), "/ui/datasets/ods.orders");
  await shot(page, "login");

  // A wrong token is refused with a reason, on the form.
  await page.fill("#token", "bgt_not-a-real-token");
  await page.keyboard.press("Enter");
  await page.waitForSelector("[role=alert]");
  assert.match(await page.locator("[role=alert]").innerText(), /unknown or revoked token/);
  seen.errors = seen.errors.filter((e) => !/401/.test(e)); // the deliberate refusal above

  // The right one: straight to the page asked for.
  await page.fill("#token", reader);
  await page.keyboard.press("Enter");
  await page.waitForURL("**/ui/datasets/ods.orders");
  assert.match(await page.locator("h1").innerText(), /ods\.orders/);
  assert.equal(await page.locator("td.cell").count() > 0, true, "the grid renders for a read token");

  const cookies = await ctx.cookies();
  assert.equal(cookies.length, 1);
  assert.equal(cookies[0].name, "batchgate_session");
  assert.equal(cookies[0].httpOnly, true);
  assert.equal(cookies[0].sameSite, "Strict");
  assert.equal(cookies[0].path, "/ui");
  assert.equal(cookies[0].expires, -1, "a session cookie: gone when the browser closes");

  // Never shown again, not even to a script on the page.
  for (const path of ["/ui/", "/ui/alerts", "/ui/repairs", "/ui/datasets/ods.orders"]) {
    const r = await page.goto(`${service.base}${path}`);
    assert.equal(r.status(), 200, path);
    assert.equal((await page.content()).includes(reader), false, `${path} shows the token`);
  }
  assert.equal(await page.evaluate(() => document.cookie), "");
  await shot(page, "overview-signed-in");

  // The session is the console's only: the API still wants the header.
  const apiCall = await page.request.get(`${service.base}/v1/batches`);
  assert.equal(apiCall.status(), 401);

  // Log out: back to the form, and the pages ask again.
  await page.click("form.logout button");
  await page.waitForURL("**/ui/login");
  await page.goto(`${service.base}/ui/`);
  assert.equal(new URL(page.url()).pathname, "/ui/login");
  clean(seen);
  await ctx.close();
});

test("a revoked token ends the console session at once", async () => {
  const { page, seen, ctx } = await open(browser, service.base, "/ui/login");
  await page.fill("#token", reader);
  await page.keyboard.press("Enter");
  await page.waitForURL("**/ui/");
  assert.match(await page.locator("h1").innerText(), /Overview/);

  const revoked = await fetch(`${service.base}/v1/tokens/console-reader`, { method: "DELETE", headers: ADMIN });
  assert.ok(revoked.ok, `revoke: ${revoked.status}`);
  await page.goto(`${service.base}/ui/alerts`);
  assert.equal(new URL(page.url()).pathname, "/ui/login");
  assert.deepEqual(await ctx.cookies(), [], "the dead session cookie is cleared");
  clean(seen);
  await ctx.close();
});

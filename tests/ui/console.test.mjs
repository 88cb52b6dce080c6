// The console in a real browser: Debian's Chromium, driven by playwright-core,
// against the real batchgate binary on a fresh SQLite registry seeded through
// the API. Every page must render the seeded facts, its links must work, the
// browser console must stay free of errors, and no request may leave for a
// host other than the service. Screenshots go to target/ui-screenshots/.
//
// Run: cargo build --bin batchgate && (cd tests/ui && npm ci && npm test)
// Env: BATCHGATE_BIN (default target/debug/batchgate), CHROMIUM (default /usr/bin/chromium).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { api, clean, launch, open, P, PREV, seed, shot, startService, stopService } from "./harness.mjs";

let service; // { proc, base, dir }
let browser;
let seeded; // ids the seed produced

before(async () => {
  service = await startService();
  seeded = await seed(service.base);
  // The scanner (every second) raises deadline_missed for the rejected day.
  for (let i = 0; i < 100; i++) {
    const alerts = await api(service.base, "GET", "/v1/alerts?state=open&kind=deadline_missed", undefined, 200);
    if (alerts.items.length > 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await stopService(service);
});

test("the root redirects to the console, whose overview shows what needs a person", async () => {
  const { page, resp, seen, ctx } = await open(browser, service.base, "/");
  assert.equal(resp.status(), 200);
  assert.equal(new URL(page.url()).pathname, "/ui/");
  await shot(page, "overview");
  const rejections = page.locator("section", { has: page.locator("#rej-h") });
  const row = rejections.locator("tr", { hasText: seeded.rejected });
  await assert.doesNotReject(row.first().waitFor());
  const text = await row.first().innerText();
  assert.match(text, /volume_vs_baseline/);
  assert.match(text, /row_count: 120/, "observed");
  assert.match(text, /baseline: 1010/, "expected");
  const running = await page.locator("section", { has: page.locator("#run-h") }).innerText();
  assert.match(running, new RegExp(seeded.running));
  assert.match(running, /1h 5\dm|2h 00m/, "lease time left");
  const late = await page.locator("section", { has: page.locator("#late-h") }).innerText();
  assert.match(late, /ods\.orders\s+2026-08-24/);
  assert.match(await page.locator(".tiles").innerText(), /[1-9]\d*\s+critical alerts open/);
  clean(seen);
  await ctx.close();
});

test("the partition grid colours cells by fitness and links each to its batch", async () => {
  const { page, resp, seen, ctx } = await open(browser, service.base, "/ui/datasets/ods.orders");
  assert.equal(resp.status(), 200);
  await shot(page, "dataset-ods-orders");
  const rejectedCell = page.locator(`td.cell[data-partition="${P}"]`);
  assert.equal(await rejectedCell.getAttribute("data-fitness"), "rejected");
  const restatedCell = page.locator(`td.cell[data-partition="${PREV}"]`);
  assert.equal(await restatedCell.getAttribute("data-fitness"), "ready");
  assert.match(await restatedCell.innerText(), /v2\s*·\s*1,022/, "version and row count");
  const policy = await page.locator("dl.policy").innerText();
  assert.match(policy, /core/);
  assert.match(policy, /orders-team/);
  assert.match(policy, /06:00/);
  assert.equal(await page.locator("svg.volume circle.pt").count(), 8, "seven published dates and the rejected one");
  assert.equal(await page.locator("svg.volume circle.pt.out").count(), 1, "the rejected volume lies outside the band");
  assert.match(await rejectedCell.innerText(), /tried 120/);
  assert.equal(await page.locator("svg.volume polygon.band").count(), 1, "the baseline band");
  // The cell links to the batch that decided it.
  await rejectedCell.locator("a.celllink").click();
  await page.waitForURL(`**/ui/batches/${seeded.rejected}`);
  assert.match(await page.locator("h1").innerText(), new RegExp(seeded.rejected));
  clean(seen);
  await ctx.close();
});

test("the grid shows a stale cell after an upstream restatement", async () => {
  const { page, seen, ctx } = await open(browser, service.base, "/ui/datasets/dwd.orders_daily");
  await shot(page, "dataset-dwd-orders-daily");
  const cell = page.locator(`td.cell[data-partition="${PREV}"]`);
  assert.equal(await cell.getAttribute("data-fitness"), "stale_upstream");
  assert.match(await cell.innerText(), /stale upstream/);
  assert.match(await cell.locator("a.celllink").getAttribute("title"), /built on ods\.orders dt=2026-08-23 version 1, now version 2/);
  clean(seen);
  await ctx.close();
});

test("a rejected batch shows its failed check with observed and expected", async () => {
  const { page, resp, seen, ctx } = await open(browser, service.base, `/ui/batches/${seeded.rejected}`);
  assert.equal(resp.status(), 200);
  await shot(page, "batch-rejected");
  const row = page.locator("table.checks tr", { hasText: "volume_vs_baseline" });
  const cells = await row.locator("td").allInnerTexts();
  assert.equal(cells[2], "fail");
  assert.match(cells[3], /row_count: 120/);
  assert.match(cells[3], /change: -0\.88/);
  assert.match(cells[4], /baseline: 1010/);
  assert.match(cells[4], /max_change: 0\.3/);
  assert.equal(cells[5], "blocks");
  assert.ok((await page.locator("table.checks tbody tr").count()) >= 6, "every check is listed");
  const timeline = await page.locator("ol.timeline").innerText();
  assert.match(timeline, /started/);
  assert.match(timeline, /rejected/);
  assert.match(await page.locator("#retry-h + *").innerText(), /No earlier attempt left rows behind/);
  clean(seen);
  await ctx.close();
});

test("a downstream batch lists its inputs with the version read and the version now", async () => {
  const { page, seen, ctx } = await open(browser, service.base, `/ui/batches/${seeded.daily}`);
  await shot(page, "batch-downstream");
  const row = page.locator("section", { has: page.locator("#inputs-h") }).locator("tbody tr");
  const cells = await row.locator("td").allInnerTexts();
  assert.match(cells[0], /ods\.orders\s+dt=2026-08-23/);
  assert.equal(cells[1], "v1");
  assert.match(cells[2], /v2\s+stale upstream/);
  clean(seen);
  await ctx.close();
});

test("the lineage graph has the edge, marked stale with the version read and current", async () => {
  const { page, resp, seen, ctx } = await open(browser, service.base, `/ui/lineage?dataset=dwd.orders_daily&partition=${encodeURIComponent(PREV)}`);
  assert.equal(resp.status(), 200);
  await shot(page, "lineage");
  const edge = page.locator(`svg.lineage g.edge[data-edge="ods.orders ${PREV} -> dwd.orders_daily ${PREV}"]`);
  assert.equal(await edge.count(), 1);
  assert.match(await edge.getAttribute("class"), /stale/);
  const label = page.locator(`svg.lineage text.edgelabel[data-edge="ods.orders ${PREV} -> dwd.orders_daily ${PREV}"]`);
  assert.match(await label.textContent(), /read v1 · now v2/);
  assert.equal(await page.locator("svg.lineage g.node").count(), 2);
  // A node links to that partition's own lineage.
  await page.locator(`svg.lineage g.node[data-node="ods.orders ${PREV}"]`).click();
  await page.waitForURL(/dataset=ods\.orders/);
  assert.match(await page.locator("h1").innerText(), /ods\.orders/);
  clean(seen);
  await ctx.close();
});

test("alerts show the owner and the recommended action", async () => {
  const { page, seen, ctx } = await open(browser, service.base, "/ui/alerts");
  await shot(page, "alerts");
  const row = page.locator("table.alerts tr", { hasText: seeded.rejected });
  const text = await row.first().innerText();
  assert.match(text, /critical/i);
  assert.match(text, /orders-team/);
  assert.match(text, /rejected/);
  assert.ok((await page.locator("table.alerts tr", { hasText: "stale downstream" }).count()) >= 1);
  // Filters are plain links and forms: a stable URL for each view.
  await page.selectOption("select[name=severity]", "warning");
  await page.click("form.filters button");
  await page.waitForURL(/severity=warning/);
  assert.equal(await page.locator("table.alerts tr", { hasText: "critical" }).count(), 0);
  clean(seen);
  await ctx.close();
});

test("repairs list the plan and its four questions", async () => {
  const { page, seen, ctx } = await open(browser, service.base, "/ui/repairs");
  await shot(page, "repairs");
  await page.click(`a[href="/ui/repairs/${seeded.repair}"]`);
  await page.waitForURL(`**/ui/repairs/${seeded.repair}`);
  await shot(page, "repair-plan");
  const questions = await page.locator(".question h3").allInnerTexts();
  assert.deepEqual(questions.map((q) => q.toLowerCase()), ["1 · scope", "2 · identity", "3 · retry boundary", "4 · after"]);
  assert.match(await page.locator(".questions").innerText(), /order_id/);
  clean(seen);
  await ctx.close();
});

test("search by batch id, dataset and task, from the keyboard", async () => {
  const { page, seen, ctx } = await open(browser, service.base, "/ui/");
  await page.keyboard.press("/");
  await page.keyboard.type(seeded.restated);
  await page.keyboard.press("Enter");
  await page.waitForURL(`**/ui/batches/${seeded.restated}`);
  await page.keyboard.press("/");
  await page.keyboard.type("dwd.orders_daily");
  await page.keyboard.press("Enter");
  await page.waitForURL("**/ui/datasets/dwd.orders_daily");
  await page.keyboard.press("/");
  await page.keyboard.type("load_orders");
  await page.keyboard.press("Enter");
  await page.waitForURL(/\/ui\/search\?q=load_orders/);
  await shot(page, "search");
  assert.match(await page.locator("main").innerText(), new RegExp(seeded.rejected));
  // g then d: the datasets page.
  await page.keyboard.press("g");
  await page.keyboard.press("d");
  await page.waitForURL("**/ui/datasets");
  await shot(page, "datasets");
  assert.equal(await page.locator("main tbody tr").count(), 3);
  clean(seen);
  await ctx.close();
});

test("every navigation link and every link on the overview answers 200", async () => {
  const { page, seen, ctx } = await open(browser, service.base, "/ui/");
  const hrefs = new Set(await page.locator("a[href^='/']").evaluateAll((as) => as.map((a) => a.getAttribute("href"))));
  assert.ok(hrefs.size >= 10, `links found: ${[...hrefs]}`);
  for (const href of hrefs) {
    const r = await page.request.get(`${service.base}${href}`);
    assert.equal(r.status(), 200, href);
  }
  const missing = await page.goto(`${service.base}/ui/batches/no-such-batch`);
  assert.equal(missing.status(), 404);
  assert.match(await page.locator("h1").innerText(), /Not found/);
  seen.errors = seen.errors.filter((e) => !/404/.test(e)); // the deliberate 404 above
  clean(seen);
  await ctx.close();
});

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
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const BIN = process.env.BATCHGATE_BIN || join(ROOT, "target/debug/batchgate");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = join(ROOT, "target/ui-screenshots");

const DAY = "2026-08-24";
const P = `dt=${DAY}`;
const PREV = "dt=2026-08-23";

let service; // { proc, base, dir }
let browser;
let seeded; // ids the seed produced

/** A free loopback port (closed again before the service binds it). */
function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

async function startService(extraEnv = {}) {
  const dir = mkdtempSync(join(tmpdir(), "bg-ui-"));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const proc = spawn(BIN, ["serve"], {
    env: {
      PATH: process.env.PATH,
      BATCHGATE_DATABASE_URL: `sqlite://${join(dir, "registry.db")}`,
      BATCHGATE_LISTEN: `127.0.0.1:${port}`,
      BATCHGATE_SCAN_INTERVAL: "1s",
      RUST_LOG: "warn",
      ...extraEnv,
    },
    stdio: ["ignore", "inherit", "inherit"],
  });
  for (let i = 0; i < 100; i++) {
    if (proc.exitCode !== null) throw new Error(`batchgate exited with ${proc.exitCode}`);
    try {
      if ((await fetch(`${base}/healthz`)).ok) return { proc, base, dir };
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  proc.kill("SIGKILL");
  throw new Error("batchgate did not answer /healthz within 10 s");
}

async function stopService(s) {
  if (!s) return;
  if (s.proc.exitCode === null) {
    const exited = new Promise((r) => s.proc.once("exit", r));
    s.proc.kill("SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
    if (s.proc.exitCode === null) s.proc.kill("SIGKILL");
  }
  rmSync(s.dir, { recursive: true, force: true });
}

/** One API call; fails the test on an unexpected status. */
async function api(base, method, path, body, want, headers = {}) {
  const resp = await fetch(`${base}${path}`, {
    method,
    headers: { "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await resp.text();
  const value = text ? JSON.parse(text) : null;
  if (want !== undefined) assert.equal(resp.status, want, `${method} ${path}: ${text}`);
  return value;
}

function evidence(partition, rows) {
  return {
    marker: `hdfs://warehouse/${partition}/_SUCCESS`,
    partitions: [{ partition, rows_written: rows, row_count: rows, distinct_keys: rows, null_keys: 0 }],
  };
}

async function build(base, { task, dataset, dt, rows, inputs = [], want = 200, headers }) {
  const partition = `dt=${dt}`;
  const started = await api(
    base,
    "POST",
    "/v1/batches",
    { task, dataset, dt, partitions: [partition], inputs: inputs.map((d) => ({ dataset: d, partition })) },
    201,
    headers,
  );
  await api(base, "POST", `/v1/batches/${started.batch_id}/commit`, evidence(partition, rows), want, headers);
  return started.batch_id;
}

/** The registry the pages are checked against, built through the API. */
async function seed(base, headers = {}) {
  const put = (name, policy) => api(base, "PUT", `/v1/datasets/${name}`, policy, 201, headers);
  await put("ods.orders", {
    tier: "core",
    owner: "orders-team",
    unique_key: ["order_id"],
    deadline: { time: "06:00", days_after_dt: 1 },
    max_volume_change: 0.3,
  });
  await put("dwd.orders_daily", { tier: "standard", owner: "analytics" });
  await put("ads.revenue", { tier: "standard", owner: "finance-bi" });

  // A week of history, then a build downstream on the last day of it.
  const volumes = [1000, 1040, 980, 1010, 1060, 990, 1020];
  for (let i = 0; i < volumes.length; i++) {
    const dt = `2026-08-${String(17 + i).padStart(2, "0")}`;
    await build(base, { task: "load_orders", dataset: "ods.orders", dt, rows: volumes[i], headers });
  }
  const daily = await build(base, {
    task: "build_orders_daily",
    dataset: "dwd.orders_daily",
    dt: "2026-08-23",
    rows: 40,
    inputs: ["ods.orders"],
    headers,
  });
  // Restate the upstream day: the downstream build is now stale.
  const restated = await build(base, { task: "load_orders", dataset: "ods.orders", dt: "2026-08-23", rows: 1022, headers });
  // A volume collapse on a core dataset: rejected by volume_vs_baseline.
  const rejected = await build(base, {
    task: "load_orders",
    dataset: "ods.orders",
    dt: DAY,
    rows: 120,
    want: 422,
    headers,
  });
  // A batch still running, with a long lease.
  const running = await api(
    base,
    "POST",
    "/v1/batches",
    { task: "build_revenue", dataset: "ads.revenue", dt: DAY, partitions: [P], lease_seconds: 7200 },
    201,
    headers,
  );
  const repair = await api(
    base,
    "POST",
    "/v1/repairs",
    { dataset: "ods.orders", partitions: [P], action: "rebuild", reason: "volume collapse on 08-24" },
    201,
    headers,
  );
  return { daily, restated, rejected, running: running.batch_id, repair: repair.id };
}

/**
 * Opens `path`, watching the browser console and every request; returns the
 * page and what was seen. The caller asserts with `clean(seen)`.
 */
async function open(path, base = service.base, context) {
  const ctx = context || (await browser.newContext({ viewport: { width: 1440, height: 900 } }));
  const page = await ctx.newPage();
  const seen = { errors: [], foreign: [], failed: [] };
  const origin = new URL(base).origin;
  page.on("console", (m) => {
    if (m.type() === "error") seen.errors.push(m.text());
  });
  page.on("pageerror", (e) => seen.errors.push(String(e)));
  page.on("request", (r) => {
    const u = r.url();
    if (!u.startsWith("data:") && new URL(u).origin !== origin) seen.foreign.push(u);
  });
  page.on("requestfailed", (r) => seen.failed.push(`${r.url()} ${r.failure()?.errorText}`));
  const resp = await page.goto(`${base}${path}`);
  return { page, resp, seen, ctx };
}

function clean(seen) {
  assert.deepEqual(seen.errors, [], "console errors");
  assert.deepEqual(seen.foreign, [], "requests to other hosts");
  assert.deepEqual(seen.failed, [], "failed requests");
}

async function shot(page, name) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

before(async () => {
  service = await startService();
  seeded = await seed(service.base);
  // The scanner (every second) raises deadline_missed for the rejected day.
  for (let i = 0; i < 100; i++) {
    const alerts = await api(service.base, "GET", "/v1/alerts?state=open&kind=deadline_missed", undefined, 200);
    if (alerts.items.length > 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-dev-shm-usage",
    ],
  });
});

after(async () => {
  await browser?.close();
  await stopService(service);
});

test("the root redirects to the console, whose overview shows what needs a person", async () => {
  const { page, resp, seen, ctx } = await open("/");
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
  const { page, resp, seen, ctx } = await open("/ui/datasets/ods.orders");
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
  const { page, seen, ctx } = await open("/ui/datasets/dwd.orders_daily");
  await shot(page, "dataset-dwd-orders-daily");
  const cell = page.locator(`td.cell[data-partition="${PREV}"]`);
  assert.equal(await cell.getAttribute("data-fitness"), "stale_upstream");
  assert.match(await cell.innerText(), /stale upstream/);
  assert.match(await cell.locator("a.celllink").getAttribute("title"), /built on ods\.orders dt=2026-08-23 version 1, now version 2/);
  clean(seen);
  await ctx.close();
});

test("a rejected batch shows its failed check with observed and expected", async () => {
  const { page, resp, seen, ctx } = await open(`/ui/batches/${seeded.rejected}`);
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
  const { page, seen, ctx } = await open(`/ui/batches/${seeded.daily}`);
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
  const { page, resp, seen, ctx } = await open(`/ui/lineage?dataset=dwd.orders_daily&partition=${encodeURIComponent(PREV)}`);
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
  const { page, seen, ctx } = await open("/ui/alerts");
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
  const { page, seen, ctx } = await open("/ui/repairs");
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
  const { page, seen, ctx } = await open("/ui/");
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
  const { page, seen, ctx } = await open("/ui/");
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

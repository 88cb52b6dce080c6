// Shared by the browser tests: the real binary on a fresh registry, the API
// calls that seed it, Chromium, and a page opener that records console
// errors, failed requests and requests to any other host.

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

export const DAY = "2026-08-24";
export const P = `dt=${DAY}`;
export const PREV = "dt=2026-08-23";

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

export async function startService(extraEnv = {}) {
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

export async function stopService(s) {
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
export async function api(base, method, path, body, want, headers = {}) {
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
export async function seed(base, headers = {}) {
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
export async function open(browser, base, path) {
  const ctx = await browser.newContext({ viewport: { width: 1440, height: 900 } });
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

export function clean(seen) {
  assert.deepEqual(seen.errors, [], "console errors");
  assert.deepEqual(seen.foreign, [], "requests to other hosts");
  assert.deepEqual(seen.failed, [], "failed requests");
}

export async function shot(page, name) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

/** Debian's Chromium, headless, no network of its own, a fresh profile. */
export async function launch() {
  return chromium.launch({
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
}

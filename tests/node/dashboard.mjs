// Opens courtesy's dashboard in headless Chromium (the system's /usr/bin/chromium, driven by
// playwright-core) and checks that it shows a given host, with no console error or warning.
//
//   node tests/node/dashboard.mjs <dashboard url> <host key> <screenshot.png>
//
// Exit 0: the row `[data-host="<host key>"]` appeared, shows a rate, the page refreshed itself and
// no console error/warning or page error was seen; the rows' order is printed last. Exit 1 otherwise; 2 on bad usage or no browser.
// Used by tests/it/dashboard.rs. Every wait is bounded.

import { launch, requireChromium, watchdog } from "./chromium.mjs";

const APPEAR_MS = 15_000; // how long the host row may take to appear
const TOTAL_MS = 60_000; // watchdog for the whole script

const [url, hostKey, screenshot] = process.argv.slice(2);
if (!url || !hostKey || !screenshot) {
  console.error("usage: node dashboard.mjs <dashboard url> <host key> <screenshot.png>");
  process.exit(2);
}
requireChromium("dashboard");
watchdog(TOTAL_MS, 1, `dashboard FAIL: the check did not finish within ${TOTAL_MS / 1000} s`);

const problems = []; // console errors/warnings and page errors, as text
let browser;
let exitCode = 1;
try {
  browser = await launch({ viewport: { width: Number(process.env.DASH_W || 1480), height: 720 } });
  const page = browser.context.pages()[0] || (await browser.context.newPage());
  page.on("console", (msg) => {
    if (msg.type() === "error" || msg.type() === "warning") {
      const where = msg.location();
      problems.push(`console ${msg.type()}: ${msg.text()}${where?.url ? ` (${where.url}:${where.lineNumber})` : ""}`);
    }
  });
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));

  const response = await page.goto(url, { waitUntil: "load", timeout: APPEAR_MS });
  const type = response?.headers()["content-type"] || "";
  if (!response?.ok() || !type.startsWith("text/html")) {
    throw new Error(`GET ${url} answered ${response?.status()} ${type || "(no content-type)"}, not an HTML page`);
  }

  const selector = `[data-host="${hostKey.replace(/["\\]/g, "\\$&")}"]`;
  const row = page.locator(selector);
  try {
    await row.waitFor({ state: "visible", timeout: APPEAR_MS });
  } catch {
    const banner = await page.locator("#disconnected").textContent().catch(() => null);
    const shown = await page.locator("[data-host]").evaluateAll((els) => els.map((e) => e.dataset.host));
    throw new Error(
      `no row ${selector} within ${APPEAR_MS / 1000} s; rows shown: [${shown.join(", ")}]` +
        (banner && (await page.locator("#disconnected").isVisible()) ? `; banner: ${banner.trim()}` : ""),
    );
  }

  // A couple more refreshes, so that the page is shown polling and the chart has a few samples.
  const start = Number((await page.locator("body").getAttribute("data-updates")) || 0);
  await page.waitForFunction((n) => Number(document.body.dataset.updates || 0) >= n, start + 2, {
    timeout: 5_000,
  });

  const rate = ((await row.locator('[data-field="rate"]').textContent()) || "").trim();
  if (!/^\d+\.\d{2}$/.test(rate)) throw new Error(`the row shows no rate: ${JSON.stringify(rate)}`);
  const state = ((await row.locator('[data-field="state"]').textContent()) || "").trim();
  const sent = ((await row.locator('[data-field="sent"]').textContent()) || "").trim();
  const hosts = ((await page.locator("#t-hosts").textContent()) || "").trim();
  const updated = ((await page.locator("#updated").textContent()) || "").trim();
  const drawn = await row.locator("canvas").evaluate((c) => c.width > 0 && c.height > 0);
  if (!drawn) throw new Error("the row's chart canvas has no size");
  if (await page.locator("#disconnected").isVisible()) {
    throw new Error(`the disconnected notice shows: ${(await page.locator("#disconnected").textContent()).trim()}`);
  }

  const order = await page.locator("[data-host]").evaluateAll((els) => els.map((e) => e.dataset.host));
  await page.screenshot({ path: screenshot, fullPage: true });
  if (problems.length) throw new Error(`${problems.length} console problem(s):\n  ${problems.join("\n  ")}`);
  console.log(
    `dashboard ok: host ${hostKey} state=${state} rate=${rate} req/s sent=${sent}; ` +
      `${hosts} host(s), last update ${updated}; no console errors; screenshot ${screenshot}\n` +
      `rows in order: ${order.join(" ")}`,
  );
  exitCode = 0;
} catch (err) {
  console.error(`dashboard FAIL: ${err.message}`);
  if (problems.length && !String(err.message).includes("console problem")) {
    console.error(`  also seen:\n  ${problems.join("\n  ")}`);
  }
} finally {
  await browser?.close();
}
process.exit(exitCode);

// Loads one https URL in headless Chromium (the system's /usr/bin/chromium, driven by
// playwright-core) through an HTTP proxy, trusting only what the user's NSS database ($HOME/.pki)
// trusts: certificate errors are not ignored.
//
//   node tests/node/trust.mjs <url> <proxy url>
//
// Prints "loaded <status> <body text>" and exits 0 when the page loaded; prints "failed <error>"
// and exits 1 when it did not (a certificate error, for one). Exit 2 on bad usage or no browser.
// Used by tests/browser.rs. Every wait is bounded.

import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const CHROMIUM = process.env.COURTESY_CHROMIUM || "/usr/bin/chromium";
const [url, proxy] = process.argv.slice(2);
if (!url || !proxy) {
  console.error("usage: node trust.mjs <url> <proxy url>");
  process.exit(2);
}
if (!existsSync(CHROMIUM)) {
  console.error(`trust: ${CHROMIUM} is missing; install it with: apt-get install -y chromium`);
  process.exit(2);
}
const watchdog = setTimeout(() => {
  console.log("failed: no answer within 45 s");
  process.exit(1);
}, 45_000);
watchdog.unref();

const profile = mkdtempSync(join(tmpdir(), "courtesy-trust-chromium-"));
let context;
let exitCode = 1;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--headless",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      `--proxy-server=${proxy}`,
      // Chromium sends loopback destinations direct unless told not to.
      "--proxy-bypass-list=<-loopback>",
    ],
  });
  const page = context.pages()[0] || (await context.newPage());
  const response = await page.goto(url, { waitUntil: "load", timeout: 20_000 });
  const text = ((await page.locator("body").textContent()) || "").trim();
  console.log(`loaded ${response?.status()} ${text}`);
  exitCode = 0;
} catch (err) {
  console.log(`failed ${String(err.message).split("\n")[0]}`);
} finally {
  await context?.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
process.exit(exitCode);

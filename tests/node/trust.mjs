// Loads one https URL in headless Chromium (the system's /usr/bin/chromium, driven by
// playwright-core) through an HTTP proxy, trusting only what the user's NSS database ($HOME/.pki)
// trusts: certificate errors are not ignored.
//
//   node tests/node/trust.mjs <url> <proxy url>
//
// Prints "loaded <status> <body text>" and exits 0 when the page loaded; prints "failed <error>"
// and exits 1 when it did not (a certificate error, for one). Exit 2 on bad usage or no browser.
// Used by tests/it/browser.rs. Every wait is bounded.

import { launch, requireChromium, watchdog } from "./chromium.mjs";

const [url, proxy] = process.argv.slice(2);
if (!url || !proxy) {
  console.error("usage: node trust.mjs <url> <proxy url>");
  process.exit(2);
}
requireChromium("trust");
// The verdict goes to stdout, where tests/it/browser.rs reads it.
watchdog(45_000, 1, "failed: no answer within 45 s");

let browser;
let exitCode = 1;
try {
  browser = await launch({
    // Chromium sends loopback destinations direct unless told not to.
    args: [`--proxy-server=${proxy}`, "--proxy-bypass-list=<-loopback>"],
  });
  const page = browser.context.pages()[0] || (await browser.context.newPage());
  const response = await page.goto(url, { waitUntil: "load", timeout: 20_000 });
  const text = ((await page.locator("body").textContent()) || "").trim();
  console.log(`loaded ${response?.status()} ${text}`);
  exitCode = 0;
} catch (err) {
  console.log(`failed ${String(err.message).split("\n")[0]}`);
} finally {
  await browser?.close();
}
process.exit(exitCode);

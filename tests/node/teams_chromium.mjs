// Loads URLs in headless Chromium (the system's /usr/bin/chromium, driven by playwright-core)
// through an HTTP proxy given as Playwright's `proxy: { server, username, password }`: Chromium
// sends its first request without credentials and answers courtesy's 407 challenge with them.
// The https pages are trusted only if the user's NSS database ($HOME/.pki) trusts courtesy's CA.
//
//   node tests/node/teams_chromium.mjs <proxy server> <username> <password> <url>...
//
// Prints one line per URL: "loaded <status> <body text>" or "failed <error>". Exit 0 when every
// URL was tried, 2 on bad usage or no browser, 1 when the watchdog fired. Used by
// tests/it/teams_clients.rs. Every wait is bounded.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { CHROMIUM, requireChromium, watchdog } from "./chromium.mjs";

const [server, username, password, ...urls] = process.argv.slice(2);
if (!server || username === undefined || password === undefined || urls.length === 0) {
  console.error("usage: node teams_chromium.mjs <proxy server> <username> <password> <url>...");
  process.exit(2);
}
requireChromium("teams_chromium");
watchdog(60_000, 1, "failed: not done within 60 s");

const profile = mkdtempSync(join(tmpdir(), "courtesy-teams-chromium-"));
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    // Playwright adds --proxy-bypass-list=<-loopback>: loopback origins go through the proxy too.
    proxy: { server, username, password },
    args: [
      "--no-sandbox",
      "--headless",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  const page = context.pages()[0] || (await context.newPage());
  for (const url of urls) {
    try {
      const response = await page.goto(url, { waitUntil: "load", timeout: 20_000 });
      const text = ((await page.locator("body").textContent({ timeout: 5_000 })) || "").trim();
      console.log(`loaded ${response?.status()} ${text.split("\n")[0]}`);
    } catch (err) {
      console.log(`failed ${String(err.message).split("\n")[0]}`);
    }
  }
} finally {
  await context?.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
process.exit(0);

// A browser crawl through courtesy, as a crawler runs one: each page in a fresh browser context
// (its own, empty HTTP cache, as crawlers isolate sessions), one after the other.
// Usage: node cached_crawl.mjs <base url ending in /> <proxy url> <pages>
// Prints "loaded N" when every page loaded; exits 1 otherwise, 2 on a bad set-up.

import { chromium } from "playwright-core";
import { CHROMIUM, requireChromium, watchdog } from "./chromium.mjs";

const [base, proxy, count] = process.argv.slice(2);
if (!base || !proxy || !count) {
  console.error("usage: node cached_crawl.mjs <base url> <proxy url> <pages>");
  process.exit(2);
}
requireChromium("cached_crawl.mjs");
watchdog(110_000, 1, "cached_crawl.mjs: the crawl did not finish in 110 s");

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"],
  // Playwright adds --proxy-bypass-list=<-loopback>: the loopback origin goes through courtesy.
  proxy: { server: proxy },
});
let loaded = 0;
try {
  for (let page = 0; page < Number(count); page++) {
    const context = await browser.newContext();
    const tab = await context.newPage();
    const response = await tab.goto(`${base}${page}`, { waitUntil: "load", timeout: 30_000 });
    if (response && response.ok()) {
      loaded++;
    } else {
      console.error(`page ${page}: ${response ? response.status() : "no response"}`);
    }
    await context.close();
  }
} finally {
  await browser.close();
}
console.log(`loaded ${loaded}`);
process.exit(loaded === Number(count) ? 0 : 1);

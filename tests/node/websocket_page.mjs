// Loads an https page in headless Chromium (the system's /usr/bin/chromium, driven by
// playwright-core) through an HTTP proxy; the page opens a WebSocket to its own origin, as an app
// does, and writes what came back into its title. Chromium may then open the socket on the h2
// connection that carried the page (RFC 8441's extended CONNECT), when the proxy's h2 server
// allows it. courtesy's CA is trusted through the user's NSS database ($HOME/.pki).
//
//   node tests/node/websocket_page.mjs <proxy server> <page URL>
//
// Prints one line: "title <the page's title>" once it starts with "echo" or "failed", or
// "failed <error>". Exit 0 when a line was printed, 2 on bad usage or no browser, 1 when the
// watchdog fired. Used by tests/it/websockets.rs. Every wait is bounded.

import { launch, requireChromium, watchdog } from "./chromium.mjs";

const [server, url] = process.argv.slice(2);
if (!server || !url) {
  console.error("usage: node websocket_page.mjs <proxy server> <page URL>");
  process.exit(2);
}
requireChromium("websocket_page");
watchdog(60_000, 1, "failed: not done within 60 s");

let browser;
try {
  browser = await launch({ proxy: { server } });
  const page = browser.context.pages()[0] || (await browser.context.newPage());
  try {
    await page.goto(url, { waitUntil: "load", timeout: 20_000 });
    await page.waitForFunction(
      () => document.title.startsWith("echo") || document.title.startsWith("failed"),
      null,
      { timeout: 20_000 },
    );
    console.log(`title ${await page.title()}`);
  } catch (err) {
    console.log(`failed ${String(err.message).split("\n")[0]}`);
  }
} finally {
  await browser?.close();
}
process.exit(0);

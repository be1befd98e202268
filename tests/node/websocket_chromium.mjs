// Opens WebSockets from a page in headless Chromium (the system's /usr/bin/chromium, driven by
// playwright-core) through an HTTP proxy, as a crawler's browser does: Chromium sends ws:// and
// wss:// through CONNECT. The wss:// TLS is courtesy's, trusted through the user's NSS database
// ($HOME/.pki). For each URL the page sends "chromium 0" and "chromium 1" and waits for both
// echoes.
//
//   node tests/node/websocket_chromium.mjs <proxy server> <ws:// or wss:// URL>...
//
// Prints one line per URL: "echo <url> <first echo> <second echo>" or "failed <url> <error>".
// Exit 0 when every URL was tried, 2 on bad usage or no browser, 1 when the watchdog fired. Used
// by tests/it/websockets.rs. Every wait is bounded.

import { launch, requireChromium, watchdog } from "./chromium.mjs";

const [server, ...urls] = process.argv.slice(2);
if (!server || urls.length === 0) {
  console.error("usage: node websocket_chromium.mjs <proxy server> <url>...");
  process.exit(2);
}
requireChromium("websocket_chromium");
watchdog(60_000, 1, "failed: not done within 60 s");

/** In the page: opens `url`, sends two messages, resolves with both echoes (or why not). */
function echoTwice(url) {
  return new Promise((resolve) => {
    const echoes = [];
    const socket = new WebSocket(url);
    const timer = setTimeout(() => resolve(`failed ${url} no echo within 20 s`), 20_000);
    socket.onopen = () => {
      socket.send("chromium 0");
      socket.send("chromium 1");
    };
    socket.onmessage = (event) => {
      echoes.push(event.data);
      if (echoes.length === 2) {
        clearTimeout(timer);
        socket.close();
        resolve(`echo ${url} ${echoes.join(" ")}`);
      }
    };
    socket.onerror = () => {
      clearTimeout(timer);
      resolve(`failed ${url} the socket failed`);
    };
  });
}

let browser;
try {
  browser = await launch({ proxy: { server } });
  const page = browser.context.pages()[0] || (await browser.context.newPage());
  for (const url of urls) {
    try {
      console.log(await page.evaluate(echoTwice, url));
    } catch (err) {
      console.log(`failed ${url} ${String(err.message).split("\n")[0]}`);
    }
  }
} finally {
  await browser?.close();
}
process.exit(0);

// WebSocket echo through courtesy with Node's `ws` behind `https-proxy-agent`, as a Node user
// reaches a WebSocket through an HTTP proxy: the agent opens a CONNECT for ws:// and wss:// alike.
// For wss:// the TLS inside is courtesy's, trusted through NODE_EXTRA_CA_CERTS.
//
//   node tests/node/websocket_ws.mjs <proxy URL> <ws:// or wss:// URL>
//
// Sends "node 0", "node 1", "node 2" and prints each echo on a line of its own. Exit 0 when all
// three came back, 1 on an error or when the watchdog fired, 2 on bad usage. Used by
// tests/it/websockets.rs. Every wait is bounded.

import { HttpsProxyAgent } from "https-proxy-agent";
import WebSocket from "ws";

const [proxy, url] = process.argv.slice(2);
if (!proxy || !url) {
  console.error("usage: node websocket_ws.mjs <proxy URL> <url>");
  process.exit(2);
}
setTimeout(() => {
  console.error("failed: not done within 30 s");
  process.exit(1);
}, 30_000).unref();

const socket = new WebSocket(url, { agent: new HttpsProxyAgent(proxy), handshakeTimeout: 20_000 });
let n = 0;
socket.on("open", () => socket.send(`node ${n}`));
socket.on("message", (data) => {
  console.log(String(data));
  n += 1;
  if (n < 3) {
    socket.send(`node ${n}`);
  } else {
    socket.close();
  }
});
socket.on("close", () => process.exit(n === 3 ? 0 : 1));
socket.on("error", (err) => {
  console.error(`failed: ${err.message}`);
  process.exit(1);
});

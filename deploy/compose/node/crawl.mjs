// An example Node crawler behind courtesy. Node's built-in fetch ignores HTTP_PROXY/HTTPS_PROXY,
// so the crawl goes through undici's EnvHttpProxyAgent, which reads them (and NO_PROXY).
//
// It waits until courtesy is ready (its admin /readyz), trusts its CA, crawls $CRAWL_START_URL
// and the links on that host (up to $CRAWL_MAX_PAGES, a few at a time: courtesy does the pacing),
// and exits non-zero unless at least $CRAWL_MIN_PAGES pages answered 200.
//
// The CA: with NODE_EXTRA_CA_CERTS set (a mounted ca.pem, as in the Kubernetes sidecar) Node
// trusts it already; otherwise it is fetched from courtesy's admin port ($COURTESY_ADMIN,
// default http://127.0.0.1:3129) and added to Node's roots for the requests through the proxy.
import http from 'node:http';
import tls from 'node:tls';
import { EnvHttpProxyAgent, fetch, setGlobalDispatcher } from 'undici';

const admin = (process.env.COURTESY_ADMIN ?? 'http://127.0.0.1:3129').replace(/\/$/, '');
const start = new URL(process.env.CRAWL_START_URL ?? 'https://example.com/');
const maxPages = Number(process.env.CRAWL_MAX_PAGES ?? 20);
const minPages = Number(process.env.CRAWL_MIN_PAGES ?? 1);

// The admin port is courtesy itself: asked directly with node:http, never through the proxy.
function direct(url) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { timeout: 5000 }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

async function waitReady() {
  const deadline = Date.now() + Number(process.env.COURTESY_WAIT_SECONDS ?? 60) * 1000;
  for (;;) {
    try {
      if ((await direct(`${admin}/readyz`)).status === 200) return;
    } catch {}
    if (Date.now() > deadline) throw new Error(`courtesy at ${admin} is not ready`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

await waitReady();
const requestTls = process.env.NODE_EXTRA_CA_CERTS
  ? undefined
  : { ca: [...tls.rootCertificates, (await direct(`${admin}/ca.pem`)).body] };
// headersTimeout: a request may wait at courtesy up to [defaults] max_wait_seconds (300).
setGlobalDispatcher(new EnvHttpProxyAgent({ requestTls, headersTimeout: 330_000 }));

const seen = new Set([start.href]);
const queue = [start.href];
let ok = 0;
let failed = 0;
async function worker() {
  while (queue.length > 0 && ok + failed < maxPages) {
    const url = queue.shift();
    try {
      const res = await fetch(url);
      const body = await res.text();
      if (res.status !== 200) throw new Error(`status ${res.status}`);
      ok += 1;
      for (const [, href] of body.matchAll(/href="([^"]+)"/g)) {
        const next = new URL(href, url);
        next.hash = '';
        if (next.host === start.host && !seen.has(next.href) && seen.size < maxPages) {
          seen.add(next.href);
          queue.push(next.href);
        }
      }
    } catch (e) {
      failed += 1;
      console.error(`node crawler: ${url}: ${e.cause?.message ?? e.message}`);
    }
  }
}
// Four fetches in flight, then the queue refills as pages come back; loop until nothing is left.
while (queue.length > 0 && ok + failed < maxPages) {
  await Promise.all([worker(), worker(), worker(), worker()]);
}
console.log(`node crawler: ${ok} of ${ok + failed} pages answered 200 through courtesy (wanted ${minPages})`);
process.exit(ok >= minPages && failed === 0 ? 0 : 1);

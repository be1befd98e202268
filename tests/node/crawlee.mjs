// A Crawlee for Node crawl through courtesy, as a Crawlee user writes one (tests/it/crawlee.rs):
// CheerioCrawler, 16 at a time, the proxy given by `proxyConfiguration`, courtesy's CA from
// NODE_EXTRA_CA_CERTS, and every link of the same host followed from START_URL, set up as
// docs/clients.md says: 403 is not a "blocked session" status (courtesy answers a robots.txt
// refusal with its own 403, and pauses a host behind a 403 wall itself), and a page courtesy
// refused (its own 403, with `Proxy-Status: courtesy`) is set aside. Crawlee's own
// `respectRobotsTxtFile` is off: it fetches robots.txt around the proxy (courtesy's check stands in
// for it: frontier_filter.mjs). Prints one JSON line: the URLs handled and refused, and Crawlee's
// own counts of failed requests, retries and retired sessions, with every error it met.
import { CheerioCrawler, Configuration, ProxyConfiguration } from "crawlee";

const proxyUrl = process.env.PROXY_URL;
const startUrl = process.env.START_URL;
if (!proxyUrl || !startUrl) {
  console.error("usage: PROXY_URL=http://... START_URL=https://... node crawlee.mjs");
  process.exit(2);
}

const handled = [];
const refused = [];
const errors = [];
let sessionsRetired = 0;

const config = new Configuration({ persistStorage: false, purgeOnStart: true });
const crawler = new CheerioCrawler(
  {
    proxyConfiguration: new ProxyConfiguration({ proxyUrls: [proxyUrl] }),
    maxConcurrency: 16,
    sessionPoolOptions: { blockedStatusCodes: [401, 429] },
    // courtesy's own answers are text/plain: let them reach the handler, which sets them aside.
    additionalMimeTypes: ["text/plain"],
    // Verify certificates as a careful user does: courtesy's CA is in NODE_EXTRA_CA_CERTS.
    ignoreSslErrors: false,
    requestHandlerTimeoutSecs: 120,
    navigationTimeoutSecs: 120,
    // The session pool exists once the crawl runs: count every session it retires.
    preNavigationHooks: [
      ({ session }) => {
        const pool = session?.sessionPool;
        if (pool && !pool.courtesyCounted) {
          pool.courtesyCounted = true;
          pool.on("sessionRetired", () => {
            sessionsRetired += 1;
          });
        }
      },
    ],
    async requestHandler({ request, response, enqueueLinks }) {
      const proxyStatus = String(response.headers["proxy-status"] ?? "");
      if (response.statusCode === 403 && proxyStatus.startsWith("courtesy")) {
        refused.push(request.url);
        return;
      }
      handled.push(request.loadedUrl ?? request.url);
      await enqueueLinks();
    },
    async errorHandler({ request }, error) {
      errors.push(`${request.url}: ${error.message}`);
    },
    async failedRequestHandler({ request }, error) {
      errors.push(`FAILED ${request.url}: ${error.message}`);
    },
  },
  config,
);

const stats = await crawler.run([startUrl]);
console.log(
  JSON.stringify({
    handled,
    refused,
    failed: stats.requestsFailed,
    retries: crawler.stats.state.requestsRetries,
    sessionsRetired,
    errors,
  }),
);

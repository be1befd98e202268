// A Crawlee for Node crawl through courtesy on both sides' defaults (tests/it/crawlee.rs): a plain
// CheerioCrawler with nothing but the proxy and a handler that follows links, as a new user
// writes it before reading any docs: Crawlee's own concurrency, timeouts, retries and "blocked"
// statuses (401, 403, 429) as shipped. courtesy's CA comes from NODE_EXTRA_CA_CERTS. Prints one
// JSON line: the URLs handled, the URLs that failed, Crawlee's own counts of retries and retired
// sessions, and every error it met (each names the status that caused it).
import { CheerioCrawler, Configuration, ProxyConfiguration } from "crawlee";

const proxyUrl = process.env.PROXY_URL;
const startUrl = process.env.START_URL;
if (!proxyUrl || !startUrl) {
  console.error("usage: PROXY_URL=http://... START_URL=https://... node crawlee_defaults.mjs");
  process.exit(2);
}

const handled = [];
const failedUrls = [];
const errors = [];
let sessionsRetired = 0;

const config = new Configuration({ persistStorage: false, purgeOnStart: true });
const crawler = new CheerioCrawler(
  {
    proxyConfiguration: new ProxyConfiguration({ proxyUrls: [proxyUrl] }),
    // Counting only: the session pool exists once the crawl runs.
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
    async requestHandler({ request, enqueueLinks }) {
      handled.push(request.loadedUrl ?? request.url);
      await enqueueLinks();
    },
    async errorHandler({ request }, error) {
      errors.push(`${request.url}: ${error.message}`);
    },
    async failedRequestHandler({ request }, error) {
      failedUrls.push(request.url);
      errors.push(`FAILED ${request.url}: ${error.message}`);
    },
  },
  config,
);

const stats = await crawler.run([startUrl]);
console.log(
  JSON.stringify({
    handled,
    failedUrls,
    failed: stats.requestsFailed,
    retries: crawler.stats.state.requestsRetries,
    sessionsRetired,
    errors,
  }),
);

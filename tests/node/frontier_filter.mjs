// A Crawlee for Node crawl that asks courtesy before it queues (docs/clients.md, "Filter before you
// queue, pause on a cooldown"; tests/it/frontier_clients.rs): CheerioCrawler through the proxy,
// every same-host link of a page checked in one batch (POST /v1/check on courtesy's admin
// listener, COURTESY_ADMIN, with COURTESY_TOKEN when the listener has one), and only the links
// courtesy would send now or after a short wait enqueued. A path robots.txt disallows, a host an
// operator paused for an hour, a host blocked or cooling down for longer than courtesy holds a
// request: none takes a place in the queue or a slot of the crawl. The start URLs (START_URLS,
// separated by spaces) are checked the same way. This replaces Crawlee's own
// `respectRobotsTxtFile`, which fetches robots.txt around the proxy: the check reads the robots.txt
// courtesy fetched through the host's budget, with the same rules as the fetch. Prints one JSON
// line: the URLs handled, the URLs set aside (with courtesy's verdict), courtesy's own refusals
// met anyway (none expected), Crawlee's counts of failed requests and retries, and every error.
import { CheerioCrawler, Configuration, ProxyConfiguration, extractUrlsFromCheerio } from "crawlee";

const proxyUrl = process.env.PROXY_URL;
const admin = process.env.COURTESY_ADMIN;
const token = process.env.COURTESY_TOKEN;
const startUrls = (process.env.START_URLS ?? "").split(/\s+/).filter(Boolean);
if (!proxyUrl || !admin || startUrls.length === 0) {
  console.error(
    "usage: PROXY_URL=http://... COURTESY_ADMIN=http://... START_URLS='https://...' node frontier_filter.mjs",
  );
  process.exit(2);
}

const handled = [];
const setAside = [];
const refused = [];
const errors = [];

// courtesy holds a request for a host that reopens within max_hold_seconds (20 s by default) and
// sends it then: such a URL is worth queueing. A longer wait is not.
const HOLD_S = 20;
// The verdicts of a host closed for a while (the URL itself would be sent).
const CLOSED = ["cooling_down", "paused", "blocked"];
// The most URLs one POST /v1/check takes.
const BATCH = 1000;

// courtesy's verdict on each of `urls`, in one request per 1,000 (Node's fetch goes straight to
// the admin listener: it ignores HTTP_PROXY).
async function check(urls) {
  const answers = [];
  for (let i = 0; i < urls.length; i += BATCH) {
    const response = await fetch(`${admin}/v1/check`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      body: JSON.stringify(urls.slice(i, i + BATCH)),
    });
    if (!response.ok) {
      throw new Error(`courtesy's check: ${response.status} ${await response.text()}`);
    }
    answers.push(...(await response.json()));
  }
  return answers;
}

// The URLs of `urls` worth a place in the queue: courtesy would send them now, or after a wait
// it holds them through. The others are set aside with the reason.
async function worthQueueing(urls) {
  const answers = await check(urls);
  return urls.filter((url, i) => {
    const { verdict, retry_after_s: retryAfter, reason } = answers[i];
    const soon = CLOSED.includes(verdict) && retryAfter !== null && retryAfter <= HOLD_S;
    if (verdict === "allowed" || soon) {
      return true;
    }
    setAside.push({ url, verdict, reason });
    return false;
  });
}

const config = new Configuration({ persistStorage: false, purgeOnStart: true });
const crawler = new CheerioCrawler(
  {
    proxyConfiguration: new ProxyConfiguration({ proxyUrls: [proxyUrl] }),
    maxConcurrency: 16,
    sessionPoolOptions: { blockedStatusCodes: [401, 429] },
    additionalMimeTypes: ["text/plain"],
    async requestHandler({ request, response, $, enqueueLinks }) {
      const proxyStatus = String(response.headers["proxy-status"] ?? "");
      if (response.statusCode === 403 && proxyStatus.startsWith("courtesy")) {
        refused.push(request.url);
        return;
      }
      handled.push(request.loadedUrl ?? request.url);
      const page = new URL(request.loadedUrl ?? request.url);
      const links = [...new Set(extractUrlsFromCheerio($, "a[href]", page.href))].filter(
        (url) => new URL(url).hostname === page.hostname,
      );
      await enqueueLinks({ urls: await worthQueueing(links) });
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

const stats = await crawler.run(await worthQueueing(startUrls));
console.log(
  JSON.stringify({
    handled,
    setAside,
    refused,
    failed: stats.requestsFailed,
    retries: crawler.stats.state.requestsRetries,
    errors,
  }),
);

"""A Scrapy crawl that asks courtesy before it schedules (tests/it/frontier_clients.rs).

docs/clients.md, "Filter before you queue, pause on a cooldown": a spider middleware,
`CourtesyCheck`, takes every request the spider yields (its start requests, and the links each
callback follows), asks courtesy about them in one batch (POST /v1/check on the admin listener,
COURTESY_CHECK_URL, with COURTESY_TOKEN when the listener has one), and passes on to the scheduler
only those courtesy would send now or after a wait it holds them through. The check is a request
of Scrapy's own, sent by the engine (`engine.download_async`, Scrapy 2.14 and later) straight to
the admin listener (`meta={"proxy": None}`): nothing blocks the reactor. Prints one JSON line: the
URLs handled, the URLs set aside (with courtesy's verdict), courtesy's own refusals met anyway
(none expected), the pages Scrapy gave up on, and its stats.
"""

import json
import os
import sys

import scrapy
from scrapy.crawler import CrawlerProcess

# courtesy holds a request for a host that reopens within max_hold_seconds (20 s by default) and
# sends it then: such a URL is worth scheduling. A longer wait is not.
HOLD_S = 20
# The verdicts of a host closed for a while (the URL itself would be sent).
CLOSED = ("cooling_down", "paused", "blocked")
# The most URLs one POST /v1/check takes.
BATCH = 1000


class CourtesyCheck:
    """Spider middleware: drops, before they are scheduled, the requests courtesy would refuse or
    hold back for long (robots.txt, preferences, an operator's pause, a block, a long cooldown)."""

    def __init__(self, crawler):
        self.crawler = crawler
        self.url = crawler.settings.get("COURTESY_CHECK_URL")
        # The User-Agent Scrapy sends: robots.txt picks the group of the check from it, as for the GET.
        self.user_agent = crawler.settings.get("USER_AGENT")
        token = crawler.settings.get("COURTESY_TOKEN")
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    async def process_start(self, start):
        async for batch in self.batches(start):
            for o in batch:
                yield o

    async def process_spider_output(self, response, result):
        async for batch in self.batches(result):
            for o in batch:
                yield o

    async def batches(self, output):
        """The spider's output, up to BATCH requests at a time, with the requests checked."""
        pending = []
        async for o in output:
            pending.append(o)
            if sum(isinstance(p, scrapy.Request) for p in pending) >= BATCH:
                yield await self.checked(pending)
                pending = []
        if pending:
            yield await self.checked(pending)

    async def checked(self, output):
        """`output` with the requests not worth scheduling taken out."""
        requests = [o for o in output if isinstance(o, scrapy.Request)]
        if not requests:
            return output
        ask = scrapy.Request(
            self.url,
            method="POST",
            body=json.dumps({"urls": [r.url for r in requests], "user_agent": self.user_agent}),
            headers=self.headers,
            meta={"proxy": None},
            dont_filter=True,
        )
        answer = await self.crawler.engine.download_async(ask)
        if answer.status != 200:
            raise RuntimeError(f"courtesy's check: {answer.status} {answer.text}")
        verdicts = {id(r): a for r, a in zip(requests, answer.json())}
        return [o for o in output if not isinstance(o, scrapy.Request) or self.keep(o, verdicts[id(o)])]

    def keep(self, request, answer):
        """Whether courtesy would send `request` now, or after a wait it holds it through."""
        verdict, retry_after = answer["verdict"], answer.get("retry_after_s")
        if verdict == "allowed" or (
            verdict in CLOSED and retry_after is not None and retry_after <= HOLD_S
        ):
            return True
        set_aside.append({"url": request.url, "verdict": verdict, "reason": answer["reason"]})
        return False


handled, refused, set_aside = [], [], []


class Site(scrapy.Spider):
    name = "site"
    start_urls = os.environ.get("START_URLS", "").split()
    # courtesy's own refusals (403, Proxy-Status: courtesy) reach parse, to be counted.
    handle_httpstatus_list = [403]

    def parse(self, response):
        if response.status == 403 and response.headers.get("Proxy-Status", b"").startswith(b"courtesy"):
            refused.append(response.url)
            return
        handled.append(response.url)
        host = response.url.split("/")[2]
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            if url.split("/")[2] == host:
                yield scrapy.Request(url)


def main():
    admin = os.environ.get("COURTESY_ADMIN")
    if not admin or not Site.start_urls:
        sys.exit("usage: COURTESY_ADMIN=http://... START_URLS=... python3 frontier_scrapy.py")
    process = CrawlerProcess(
        {
            "SPIDER_MIDDLEWARES": {"__main__.CourtesyCheck": 600},
            "COURTESY_CHECK_URL": f"{admin}/v1/check",
            "COURTESY_TOKEN": os.environ.get("COURTESY_TOKEN"),
            "CONCURRENT_REQUESTS": 16,
            "LOG_LEVEL": "ERROR",
            "TELNETCONSOLE_ENABLED": False,
        }
    )
    crawler = process.create_crawler(Site)
    process.crawl(crawler)
    process.start()
    stats = {k: str(v) for k, v in crawler.stats.get_stats().items()}
    gave_up = [k for k in stats if k.startswith("retry/max_reached") or k.startswith("httperror/")]
    print(
        json.dumps(
            {
                "handled": handled,
                "setAside": set_aside,
                "refused": refused,
                "gaveUp": gave_up,
                "stats": stats,
            }
        )
    )


if __name__ == "__main__":
    main()

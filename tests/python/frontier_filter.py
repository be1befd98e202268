"""A Crawlee for Python crawl that asks courtesy before it queues (tests/it/frontier_clients.rs).

docs/clients.md, "Filter before you queue, pause on a cooldown": BeautifulSoupCrawler through the
proxy, the same-host links of each page checked in one batch (POST /v1/check on courtesy's admin
listener, COURTESY_ADMIN, with COURTESY_TOKEN when the listener has one), and only the links
courtesy would send now or after a short wait added to the queue. A path robots.txt disallows, a
host an operator paused for an hour, a host blocked or cooling down for longer than courtesy holds
a request: none takes a place in the queue. The start URLs (START_URLS, separated by spaces) are
checked the same way. This replaces Crawlee's own `respect_robots_txt_file`, which fetches
robots.txt around the proxy. The check goes straight to the admin listener on httpx with
`trust_env=False` (never through the proxy the environment names). Prints one JSON line: the URLs
handled, the URLs set aside (with courtesy's verdict), courtesy's own refusals met anyway (none
expected), Crawlee's counts of failed requests and retries, and every error.
"""

import asyncio
import json
import os
import sys

import httpx
from crawlee import ConcurrencySettings
from crawlee.crawlers import BeautifulSoupCrawler, BeautifulSoupCrawlingContext
from crawlee.proxy_configuration import ProxyConfiguration
from crawlee.storage_clients import MemoryStorageClient

# courtesy holds a request for a host that reopens within max_hold_seconds (20 s by default) and
# sends it then: such a URL is worth queueing. A longer wait is not.
HOLD_S = 20
# The verdicts of a host closed for a while (the URL itself would be sent).
CLOSED = ("cooling_down", "paused", "blocked")
# The most URLs one POST /v1/check takes.
BATCH = 1000


class Courtesy:
    """courtesy's admin listener, asked what it would do with a GET of each URL."""

    def __init__(self, admin: str, token: str | None = None) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.AsyncClient(base_url=admin, headers=headers, trust_env=False)
        self.set_aside: list[dict] = []

    async def check(self, urls: list[str]) -> list[dict]:
        """courtesy's verdict on each of `urls`, in one request per 1,000."""
        answers: list[dict] = []
        for i in range(0, len(urls), BATCH):
            response = await self.client.post("/v1/check", json=urls[i : i + BATCH], timeout=60)
            response.raise_for_status()
            answers.extend(response.json())
        return answers

    async def worth_queueing(self, urls: list[str]) -> list[str]:
        """The URLs courtesy would send now, or after a wait it holds them through."""
        keep = []
        for url, answer in zip(urls, await self.check(urls)):
            verdict, retry_after = answer["verdict"], answer.get("retry_after_s")
            soon = verdict in CLOSED and retry_after is not None and retry_after <= HOLD_S
            if verdict == "allowed" or soon:
                keep.append(url)
            else:
                self.set_aside.append({"url": url, "verdict": verdict, "reason": answer["reason"]})
        return keep


async def main() -> None:
    proxy_url = os.environ.get("PROXY_URL")
    admin = os.environ.get("COURTESY_ADMIN")
    start_urls = os.environ.get("START_URLS", "").split()
    if not proxy_url or not admin or not start_urls:
        sys.exit("usage: PROXY_URL=... COURTESY_ADMIN=... START_URLS=... python3 frontier_filter.py")
    courtesy = Courtesy(admin, os.environ.get("COURTESY_TOKEN"))
    handled: list[str] = []
    refused: list[str] = []
    errors: list[str] = []
    crawler = BeautifulSoupCrawler(
        proxy_configuration=ProxyConfiguration(proxy_urls=[proxy_url]),
        concurrency_settings=ConcurrencySettings(max_concurrency=16, desired_concurrency=16),
        ignore_http_error_status_codes=[403],
        storage_client=MemoryStorageClient(),
        configure_logging=False,
    )

    @crawler.router.default_handler
    async def handle(context: BeautifulSoupCrawlingContext) -> None:
        status = context.http_response.status_code
        proxy_status = context.http_response.headers.get("proxy-status", "")
        if status == 403 and proxy_status.startswith("courtesy"):
            refused.append(context.request.url)
            return
        handled.append(context.request.loaded_url or context.request.url)
        links = list(dict.fromkeys(r.url for r in await context.extract_links()))
        await context.add_requests(await courtesy.worth_queueing(links))

    @crawler.error_handler
    async def on_error(context, error: Exception) -> None:
        errors.append(f"{context.request.url}: {error!r}")

    @crawler.failed_request_handler
    async def on_failed(context, error: Exception) -> None:
        errors.append(f"FAILED {context.request.url}: {error!r}")

    stats = await crawler.run(await courtesy.worth_queueing(start_urls))
    await courtesy.client.aclose()
    print(
        json.dumps(
            {
                "handled": handled,
                "setAside": courtesy.set_aside,
                "refused": refused,
                "failed": stats.requests_failed,
                "retries": crawler.statistics.state.requests_retries,
                "errors": errors,
            }
        )
    )


asyncio.run(main())

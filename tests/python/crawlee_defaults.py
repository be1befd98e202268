"""A Crawlee for Python crawl through courtesy on both sides' defaults (tests/it/crawlee.rs).

A plain BeautifulSoupCrawler with nothing but the proxy and a handler that follows links, as a
new user writes it before reading any docs: Crawlee's own HTTP client (impit), concurrency,
timeouts, retries and blocked statuses as shipped. courtesy's CA comes from SSL_CERT_FILE. Prints
one JSON line: the URLs handled, the URLs that failed, Crawlee's own counts of retries and the
sessions it retired, and every error it met.
"""

import asyncio
import json
import os
import sys

from crawlee.crawlers import BeautifulSoupCrawler, BeautifulSoupCrawlingContext
from crawlee.proxy_configuration import ProxyConfiguration
from crawlee.sessions import Session
from crawlee.storage_clients import MemoryStorageClient

retired = 0
_retire = Session.retire


def counting_retire(self: Session) -> None:
    """Session.retire, counted: every session Crawlee retires passes here."""
    global retired
    retired += 1
    _retire(self)


Session.retire = counting_retire


async def main() -> None:
    proxy_url = os.environ.get("PROXY_URL")
    start_url = os.environ.get("START_URL")
    if not proxy_url or not start_url:
        sys.exit("usage: PROXY_URL=http://... START_URL=https://... python3 crawlee_defaults.py")
    handled: list[str] = []
    failed_urls: list[str] = []
    errors: list[str] = []
    crawler = BeautifulSoupCrawler(
        proxy_configuration=ProxyConfiguration(proxy_urls=[proxy_url]),
        # In memory and quiet, so that the test reads one JSON line; nothing about the crawl.
        storage_client=MemoryStorageClient(),
        configure_logging=False,
    )

    @crawler.router.default_handler
    async def handle(context: BeautifulSoupCrawlingContext) -> None:
        handled.append(context.request.loaded_url or context.request.url)
        await context.enqueue_links()

    @crawler.error_handler
    async def on_error(context, error: Exception) -> None:
        errors.append(f"{context.request.url}: {error!r}")

    @crawler.failed_request_handler
    async def on_failed(context, error: Exception) -> None:
        failed_urls.append(context.request.url)
        errors.append(f"FAILED {context.request.url}: {error!r}")

    stats = await crawler.run([start_url])
    print(
        json.dumps(
            {
                "handled": handled,
                "failedUrls": failed_urls,
                "failed": stats.requests_failed,
                "retries": crawler.statistics.state.requests_retries,
                "sessionsRetired": retired,
                "errors": errors,
            }
        )
    )


asyncio.run(main())

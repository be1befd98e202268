"""A Crawlee for Python crawl through courtesy, as a Crawlee user writes one (tests/it/crawlee.rs).

BeautifulSoupCrawler on its default HTTP client, 16 at a time, the proxy given by
`ProxyConfiguration`, courtesy's CA trusted (SSL_CERT_FILE: the bundle `courtesy env` names), and
every link of the same host followed from START_URL, set up as docs/clients.md says: 403 goes to
the handler instead of retiring the session (courtesy answers a robots.txt refusal with its own
403, and pauses a host behind a 403 wall itself), and a page courtesy refused (`Proxy-Status:
courtesy`) is set aside. Crawlee's own `respect_robots_txt_file` is off: it fetches robots.txt
around the proxy (courtesy's check stands in for it: frontier_filter.py). Prints one JSON line:
the URLs handled and refused, Crawlee's own counts of failed requests and retries, the sessions it
retired, and every error it met.
"""

import asyncio
import json
import os
import sys

from crawlee import ConcurrencySettings
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
        sys.exit("usage: PROXY_URL=http://... START_URL=https://... python3 crawlee_crawl.py")
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
        await context.enqueue_links()

    @crawler.error_handler
    async def on_error(context, error: Exception) -> None:
        errors.append(f"{context.request.url}: {error!r}")

    @crawler.failed_request_handler
    async def on_failed(context, error: Exception) -> None:
        errors.append(f"FAILED {context.request.url}: {error!r}")

    stats = await crawler.run([start_url])
    print(
        json.dumps(
            {
                "handled": handled,
                "refused": refused,
                "failed": stats.requests_failed,
                "retries": crawler.statistics.state.requests_retries,
                "sessionsRetired": retired,
                "errors": errors,
            }
        )
    )


asyncio.run(main())

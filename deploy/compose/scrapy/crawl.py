"""An example Scrapy spider behind courtesy: it crawls one site from $CRAWL_START_URL, following
links on that host, and leaves the politeness to courtesy (no delays of its own).

Run it with run.py, which waits for courtesy and trusts its CA first.
"""

import os
from urllib.parse import urlsplit

import scrapy


class Site(scrapy.Spider):
    name = "courtesy-example"
    custom_settings = {
        # courtesy holds each request until the host's budget has a token: Scrapy's own delays and
        # AutoThrottle would only slow the crawl further, so they are off and many requests may be
        # outstanding at once.
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "CONCURRENT_REQUESTS": 16,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
        # A request may wait at courtesy up to [defaults] max_wait_seconds (300): wait longer.
        "DOWNLOAD_TIMEOUT": 330,
        # courtesy obeys robots.txt itself (a disallowed path answers a local 403).
        "ROBOTSTXT_OBEY": False,
        # A local 429/503 from courtesy carries Retry-After: let courtesy's own retry_idempotent
        # retry after the cooldown rather than Scrapy at once.
        "RETRY_ENABLED": False,
        # Scrapy verifies no certificates by default. This factory verifies against the OpenSSL
        # default store, which run.py points at courtesy's CA with SSL_CERT_FILE.
        "DOWNLOADER_CLIENTCONTEXTFACTORY": "scrapy.core.downloader.contextfactory.BrowserLikeContextFactory",
        "CLOSESPIDER_PAGECOUNT": int(os.environ.get("CRAWL_MAX_PAGES", "20")),
        "LOG_LEVEL": os.environ.get("CRAWL_LOG_LEVEL", "INFO"),
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        start = os.environ["CRAWL_START_URL"]
        self.start_urls = [start]
        self.allowed_domains = [urlsplit(start).hostname]

    def parse(self, response):
        yield {"url": response.url, "status": response.status}
        yield from response.follow_all(css="a", callback=self.parse)

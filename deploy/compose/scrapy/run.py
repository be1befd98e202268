"""Runs the example spider through courtesy: waits until courtesy is ready (its admin /readyz),
trusts its CA, crawls, and exits non-zero unless at least $CRAWL_MIN_PAGES pages came back 200.

Environment: HTTP_PROXY / HTTPS_PROXY (courtesy's proxy port), COURTESY_ADMIN (its admin URL,
default http://127.0.0.1:3129), CRAWL_START_URL, CRAWL_MAX_PAGES, CRAWL_MIN_PAGES, and
COURTESY_CA_FILE to use a mounted ca.pem instead of fetching it from the admin port.
"""

import json
import os
import subprocess
import sys
import time
import urllib.request

admin = os.environ.get("COURTESY_ADMIN", "http://127.0.0.1:3129").rstrip("/")
# The admin port is courtesy itself: never through the proxy.
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url):
    with direct.open(url, timeout=5) as r:
        return r.status, r.read()


deadline = time.monotonic() + float(os.environ.get("COURTESY_WAIT_SECONDS", "60"))
while True:
    try:
        if get(admin + "/readyz")[0] == 200:
            break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit(f"scrapy crawler: courtesy at {admin} is not ready")
    time.sleep(1)

ca = os.environ.get("COURTESY_CA_FILE")
if not ca:
    ca = "/tmp/courtesy-ca.pem"
    with open(ca, "wb") as f:
        f.write(get(admin + "/ca.pem")[1])

out = "/tmp/pages.jsonl"
# SSL_CERT_FILE: OpenSSL's default store, which the spider's context factory verifies against.
env = dict(os.environ, SSL_CERT_FILE=ca)
subprocess.run(["scrapy", "runspider", "crawl.py", "-O", out + ":jsonlines"], env=env, check=True)

pages = [json.loads(line) for line in open(out, encoding="utf-8")]
ok = [p for p in pages if p["status"] == 200]
want = int(os.environ.get("CRAWL_MIN_PAGES", "1"))
print(f"scrapy crawler: {len(ok)} of {len(pages)} pages answered 200 through courtesy (wanted {want})", flush=True)
sys.exit(0 if len(ok) >= want and len(ok) == len(pages) else 1)

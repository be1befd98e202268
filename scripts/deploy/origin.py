#!/usr/bin/env python3
"""A small origin for scripts/test-deploy, on 127.0.0.1 only: a site of linked pages for the
example crawlers, /slow for the SIGTERM drain check, /throttled (429, Retry-After: 900) and /wall (403) for the
monitoring check, and a log of every arrival (time, path, the
courtesy instance from its Via header) that the checks count.

    origin.py --port-file F --log F [--cert C --key K] [--pages N] [--lifetime S]

It picks a free port, writes it to --port-file, and stops by itself after --lifetime seconds.
"""

import argparse
import os
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--pages", type=int, default=12)
    ap.add_argument("--lifetime", type=float, default=900)
    args = ap.parse_args()
    lock = threading.Lock()
    log = open(args.log, "a", buffering=1, encoding="utf-8")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def do_GET(self):
            arrived = time.time()
            with lock:
                log.write(json.dumps({
                    "t": arrived,
                    "path": self.path,
                    "via": self.headers.get("Via", ""),
                    "ua": self.headers.get("User-Agent", ""),
                }) + "\n")
            path = self.path.split("?", 1)[0]
            if path == "/robots.txt":
                self.reply(200, "text/plain", "User-agent: *\nAllow: /\n")
            elif path == "/slow":
                # Held long enough that a SIGTERM lands while it is in flight.
                time.sleep(float(self.path.partition("s=")[2] or 3))
                self.reply(200, "text/plain", "slow done\n")
            elif path.startswith("/throttled"):
                # A server that throttles: 429 with a long Retry-After (the monitoring check's
                # storm: the host cools down, and the alert on a long cooldown fires).
                self.send_response(429)
                self.send_header("Retry-After", "900")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path.startswith("/wall"):
                # A 403 wall: five in a row are a hard block (the monitoring check's blocks).
                self.reply(403, "text/plain", "forbidden\n")
            elif path == "/" or path.startswith("/page/"):
                n = int(path.rsplit("/", 1)[1]) if path.startswith("/page/") else 0
                # Each page links to the next two, so a crawler reaches all of them.
                links = "".join(
                    f'<a href="/page/{m}">page {m}</a>\n'
                    for m in (n + 1, n + 2) if m < args.pages
                )
                self.reply(200, "text/html", f"<html><body><h1>page {n}</h1>\n{links}</body></html>\n")
            else:
                self.reply(404, "text/plain", "not found\n")

        def reply(self, status, ctype, body):
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    threading.Timer(args.lifetime, server.shutdown).start()
    server.serve_forever()


if __name__ == "__main__":
    main()

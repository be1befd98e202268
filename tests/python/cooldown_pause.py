"""Pause a frontier's queue for a host while courtesy holds it closed (tests/it/frontier_clients.rs).

docs/clients.md, "Filter before you queue, pause on a cooldown": follows courtesy's host events
(GET /v1/events on the admin listener, Server-Sent Events) with nothing but the standard library.
`cooldown_started` and `paused` close the host in the frontier until their `until_unix_ms`;
`cooldown_ended` and `resumed` open it again at once. A dropped stream is reconnected with
`Last-Event-ID`, so the events sent meanwhile are replayed from courtesy's buffer (a `missed`
event says when some are gone: each closure still ends at its `until_unix_ms`). Run as a script,
it prints one JSON line when the stream opens and one per host closed or opened.
Environment: COURTESY_ADMIN (default http://127.0.0.1:3129), COURTESY_TOKEN if the admin listener
has one.
"""

import http.client
import json
import os
import sys
import threading
import time
import urllib.request

# The admin listener, never through a proxy the environment names.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# A stream silent for longer than this is taken for dead (courtesy sends a keep-alive every 15 s).
READ_TIMEOUT_S = 45


class Frontier:
    """The crawler's queue, by host: a closed host gets no request handed out until it opens."""

    def __init__(self, on_change=None):
        self.closed = {}  # host -> {a cooldown's cause or "pause": until (seconds since the epoch)}
        self.lock = threading.Lock()
        self.on_change = on_change or (lambda host, is_open: None)

    def close(self, host, why, until_unix_ms):
        until = until_unix_ms / 1000 if until_unix_ms else float("inf")
        with self.lock:
            was_open = not self.running(host)
            self.closed[host] = {**self.running(host), why: until}
        if was_open:
            self.on_change(host, False)

    def open(self, host, why):
        with self.lock:
            ended = self.closed.get(host, {}).pop(why, None) is not None
            now_open = not self.running(host)
        if ended and now_open:
            self.on_change(host, True)

    def running(self, host):
        """The closures of `host` whose time has not run out (the lock held)."""
        return {w: u for w, u in self.closed.get(host, {}).items() if u > time.time()}

    def may_fetch(self, host):
        """Whether the frontier may hand out a request for `host` now."""
        with self.lock:
            return not self.running(host)


def events(admin, token=None, on_open=lambda: None):
    """courtesy's host events, as dicts, for ever: reconnects after a drop with Last-Event-ID."""
    last_id, retry_s = None, 1.0
    while True:
        headers = {"Accept": "text/event-stream"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        request = urllib.request.Request(f"{admin}/v1/events", headers=headers)
        try:
            with OPENER.open(request, timeout=READ_TIMEOUT_S) as stream:
                on_open()
                data, event_id = [], last_id
                for raw in stream:
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if not line:  # the end of an event: only a whole event moves Last-Event-ID
                        last_id = event_id
                        if data:
                            yield json.loads("\n".join(data))
                        data = []
                        continue
                    if line.startswith(":"):
                        continue  # a keep-alive comment
                    field, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if field == "data":
                        data.append(value)
                    elif field == "id":
                        event_id = value
                    elif field == "retry" and value.isdigit():
                        retry_s = int(value) / 1000
        except (OSError, ValueError, http.client.HTTPException) as e:
            print(f"courtesy's events: {e}; reconnecting", file=sys.stderr)
        time.sleep(retry_s)


def follow(frontier, admin, token=None, on_open=lambda: None):
    """Closes and opens the frontier's hosts as courtesy's events say."""
    for event in events(admin, token, on_open):
        kind, host = event["type"], event.get("host")
        if kind == "cooldown_started":
            # By cause: a Visit-time closure may overlap a 429's, and each ends on its own.
            frontier.close(host, event.get("cause", "cooldown"), event.get("until_unix_ms"))
        elif kind == "cooldown_ended":
            frontier.open(host, event.get("cause", "cooldown"))
        elif kind == "paused":
            frontier.close(host, "pause", event.get("until_unix_ms"))
        elif kind == "resumed":
            frontier.open(host, "pause")
        elif kind == "missed":
            print(f"courtesy's events: some missed after {event['last_event_id']}", file=sys.stderr)


def main():
    def say(**fields):
        print(json.dumps({**fields, "at": time.time()}), flush=True)

    frontier = Frontier(lambda host, is_open: say(host=host, open=is_open))
    admin = os.environ.get("COURTESY_ADMIN", "http://127.0.0.1:3129")
    follow(frontier, admin, os.environ.get("COURTESY_TOKEN"), lambda: say(stream="open"))


if __name__ == "__main__":
    main()

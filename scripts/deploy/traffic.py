#!/usr/bin/env python3
"""Clients and checks for scripts/test-deploy: requests sent through courtesy from the host, and
the arrivals the origin logged (origin.py) counted against the budget.

    traffic.py paced  --proxy URL --url URL --count N --rate R --burst B
        N requests at once through one courtesy; all must answer 200, and their arrivals at the
        origin must respect rate R / burst B (so they take at least (N - B) / R seconds).
    traffic.py shared --proxy URL --proxy URL --url URL --count N --rate R --burst B --log F
                      --mode shared|independent
        N requests through each of two courtesy instances at once. shared: together they stay
        within one budget (at most B + R*T arrivals in any window of T seconds); independent:
        each instance keeps its own budget, so together up to twice that.
"""

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
import uuid

# urllib skips even an explicit proxy for the hosts in no_proxy: these checks must go through it.
for _var in ("no_proxy", "NO_PROXY"):
    os.environ.pop(_var, None)


def fetch_all(proxy, url, count, tag):
    """Sends `count` GETs through `proxy` at once (one thread each); returns their statuses."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    statuses = [None] * count

    def one(i):
        sep = "&" if "?" in url else "?"
        try:
            with opener.open(f"{url}{sep}tag={tag}&i={i}", timeout=120) as r:
                r.read()
                statuses[i] = r.status
        except urllib.error.HTTPError as e:
            statuses[i] = e.code
        except Exception as e:  # noqa: BLE001 - reported as the failure it is
            statuses[i] = repr(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def arrivals(log, tag):
    """The origin's log lines for one check, by arrival time."""
    out = []
    with open(log, encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            if f"tag={tag}" in entry["path"]:
                out.append(entry)
    return sorted(out, key=lambda e: e["t"])


def max_in_window(times, window):
    """The most arrivals inside any half-open window of `window` seconds."""
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


def per_second(times):
    if not times:
        return []
    t0 = times[0]
    counts = [0] * (int(times[-1] - t0) + 1)
    for t in times:
        counts[int(t - t0)] += 1
    return counts


def wait_for_arrivals(log, tag, want, timeout=10):
    deadline = time.time() + timeout
    while True:
        got = arrivals(log, tag)
        if len(got) >= want or time.time() > deadline:
            return got
        time.sleep(0.1)


def paced(args):
    tag = uuid.uuid4().hex[:12]
    started = time.monotonic()
    statuses = fetch_all(args.proxy[0], args.url, args.count, tag)
    elapsed = time.monotonic() - started
    bad = [s for s in statuses if s != 200]
    minimum = (args.count - args.burst) / args.rate
    print(f"paced: {args.count} requests at once through {args.proxy[0]} took {elapsed:.2f} s "
          f"(rate {args.rate}/s, burst {args.burst}: at least {minimum:.2f} s); statuses {sorted(set(map(str, statuses)))}")
    if bad:
        sys.exit(f"paced: {len(bad)} requests did not answer 200: {bad[:5]}")
    # 10 % slack for clock granularity; a proxy that does not pace takes milliseconds.
    if elapsed < minimum * 0.9:
        sys.exit(f"paced: {elapsed:.2f} s is faster than the budget allows ({minimum:.2f} s)")
    if args.log:
        times = [e["t"] for e in wait_for_arrivals(args.log, tag, args.count)]
        worst = max_in_window(times, 1.0)
        print(f"paced: origin saw {len(times)} arrivals, per second {per_second(times)}, at most {worst} in any 1 s")
        if worst > args.burst + args.rate + 1:
            sys.exit(f"paced: {worst} arrivals in one second, the budget allows {args.burst + args.rate:.0f}")


def shared(args):
    tag = uuid.uuid4().hex[:12]
    results = {}
    started = time.monotonic()

    def through(proxy):
        results[proxy] = fetch_all(proxy, args.url, args.count, tag)

    threads = [threading.Thread(target=through, args=(p,)) for p in args.proxy]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    for proxy, statuses in results.items():
        bad = [s for s in statuses if s != 200]
        if bad:
            sys.exit(f"shared: {len(bad)} requests through {proxy} did not answer 200: {bad[:5]}")
    total = args.count * len(args.proxy)
    got = wait_for_arrivals(args.log, tag, total)
    times = [e["t"] for e in got]
    instances = sorted({e["via"] for e in got})
    budgets = 1 if args.mode == "shared" else len(args.proxy)
    print(f"shared ({args.mode}): {total} requests through {len(args.proxy)} instances took {elapsed:.2f} s; "
          f"origin saw {len(times)} arrivals from {len(instances)} instances {instances}")
    print(f"shared ({args.mode}): arrivals per second {per_second(times)}")
    if len(times) != total:
        sys.exit(f"shared: the origin saw {len(times)} arrivals, expected {total}")
    if len(instances) != len(args.proxy):
        sys.exit("shared: the arrivals did not come through every instance (Via headers)")
    failed = False
    for window in (1.0, 2.0, 4.0):
        worst = max_in_window(times, window)
        allowed = budgets * (args.burst + args.rate * window)
        # One arrival of slack: two instances' clocks and Redis round trips meet at window edges.
        ok = worst <= allowed + 1
        failed |= not ok
        print(f"shared ({args.mode}): at most {worst} arrivals in any {window:g} s window "
              f"(one budget per {'cluster' if budgets == 1 else 'instance'}: {allowed:g}) {'ok' if ok else 'TOO MANY'}")
    minimum = (total - budgets * args.burst) / (budgets * args.rate)
    if elapsed < minimum * 0.9:
        failed = True
        print(f"shared ({args.mode}): {elapsed:.2f} s is faster than {budgets} budget(s) allow ({minimum:.2f} s)")
    if failed:
        sys.exit(f"shared ({args.mode}): the instances together went over the budget")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=["paced", "shared"])
    ap.add_argument("--proxy", action="append", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--burst", type=int, default=1)
    ap.add_argument("--log")
    ap.add_argument("--mode", choices=["shared", "independent"], default="shared")
    args = ap.parse_args()
    {"paced": paced, "shared": shared}[args.check](args)


if __name__ == "__main__":
    main()

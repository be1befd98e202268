#!/usr/bin/env python3
"""Checks deploy/monitoring/grafana-dashboard.json against a running Prometheus and courtesy, for
scripts/test-deploy: every panel's expression (Grafana's variables filled in) parses and runs in
Prometheus, and every courtesy metric it names is one courtesy's /metrics has.

    check_dashboard.py DASHBOARD PROMETHEUS_URL METRICS_URL
"""

import json
import re
import sys
import urllib.parse
import urllib.request

VARIABLES = {"$__rate_interval": "1m", "$host": ".*", "${datasource}": ""}


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def main():
    dashboard, prometheus, metrics_url = sys.argv[1:4]
    panels = json.load(open(dashboard))["panels"]
    metrics = get(metrics_url)
    # Family names as /metrics states them (`# TYPE name kind`) and every sample's name.
    known = set(re.findall(r"^# TYPE (\S+)", metrics, re.M))
    known |= set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", metrics, re.M))
    problems, checked = [], 0
    for panel in panels:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in VARIABLES.items():
                expr = expr.replace(var, value)
            answer = json.loads(get(prometheus + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
            if answer.get("status") != "success":
                problems.append(f"{panel['title']}: {expr}: {answer.get('error')}")
            for name in set(re.findall(r"\bcourtesy_[a-z0-9_]+", expr)):
                base = re.sub(r"_(total|bucket|sum|count)$", "", name)
                if name not in known and base not in known:
                    problems.append(f"{panel['title']}: {name} is not in courtesy's /metrics")
            checked += 1
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"{checked} dashboard expressions parse and run; every metric they name is in /metrics")


if __name__ == "__main__":
    main()

"""Where the engine signals come from (setting ``source`` and a target's ``source``): the cross-checks of the
Prometheus settings. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from watchdog.config.selectors import show
from watchdog.config.settings import BY_NAME
from watchdog.core.model import Target
from watchdog.core.promql import url_problem

SOURCES = BY_NAME["source"].choices
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def source_checks(v: Mapping[str, Any], targets: Sequence[Target]) -> list[str]:
    """source prometheus needs a usable prometheusUrl; the pod label names must be Prometheus label names; a
    query must fit in a cycle."""
    problems = []
    users = [t.name for t in targets if (t.source or v["source"]) == "prometheus"]
    url = v["prometheus_url"]
    if users and url is None:
        problems.append(f"source prometheus (targets {', '.join(users)}) needs prometheusUrl (e.g. "
                        "http://prometheus.monitoring:9090)")
    if url is not None and (problem := url_problem(str(url))):
        problems.append(f"prometheusUrl {show(url)} {problem}")
    for name in ("prometheus_namespace_label", "prometheus_pod_label"):
        if not _LABEL_NAME.fullmatch(str(v[name])):
            problems.append(f"{BY_NAME[name].key} {show(v[name])} is not a Prometheus label name")
    if users and v["prometheus_timeout_seconds"] >= v["scrape_interval_seconds"]:
        problems.append(f"prometheusTimeoutSeconds ({v['prometheus_timeout_seconds']:g}) must be shorter than "
                        f"scrapeIntervalSeconds ({v['scrape_interval_seconds']:g})")
    return problems

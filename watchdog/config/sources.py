"""Where the engine signals come from (setting ``source`` and a target's ``source``): the cross-checks of the
Prometheus settings. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from watchdog.config.selectors import show
from watchdog.config.settings import BY_NAME
from watchdog.core.model import Target
from watchdog.core.promql import label_problem, url_problem

SOURCES = BY_NAME["source"].choices


def source_checks(v: Mapping[str, Any], targets: Sequence[Target]) -> list[str]:
    """source prometheus needs a usable prometheusUrl; the pod label names must be Prometheus label names; one
    way to authenticate (a bearer token, or basic auth's username AND password); a query must fit in a cycle."""
    problems = []
    users = [t.name for t in targets if (t.source or v["source"]) == "prometheus"]
    url = v["prometheus_url"]
    if users and url is None:
        problems.append(f"source prometheus (targets {', '.join(users)}) needs prometheusUrl (e.g. "
                        "http://prometheus.monitoring:9090)")
    if url is not None and (problem := url_problem(str(url))):
        problems.append(f"prometheusUrl {show(url)} {problem}")
    for name in ("prometheus_namespace_label", "prometheus_pod_label"):
        if problem := label_problem(str(v[name])):
            problems.append(f"{BY_NAME[name].key} {show(v[name])} {problem}")
    if v["prometheus_namespace_label"] == v["prometheus_pod_label"]:
        problems.append(f"prometheusNamespaceLabel and prometheusPodLabel are both {show(v['prometheus_pod_label'])}: "
                        "a pod is found by two labels")
    user, password = v["prometheus_username_file"], v["prometheus_password_file"]
    if (user is None) != (password is None):
        problems.append("prometheusUsernameFile and prometheusPasswordFile go together (basic auth needs both)")
    elif user is not None and v["prometheus_bearer_token_file"] is not None:
        problems.append("prometheusBearerTokenFile and basic auth (prometheusUsernameFile) exclude each other: "
                        "Prometheus takes one Authorization header")
    tenant = v["prometheus_tenant"]
    if tenant is not None and (not str(tenant) or not str(tenant).isprintable() or len(str(tenant)) > 256):
        problems.append(f"prometheusTenant {show(tenant)} must be 1-256 printable characters")
    if users and v["prometheus_timeout_seconds"] >= v["scrape_interval_seconds"]:
        problems.append(f"prometheusTimeoutSeconds ({v['prometheus_timeout_seconds']:g}) must be shorter than "
                        f"scrapeIntervalSeconds ({v['scrape_interval_seconds']:g})")
    return problems

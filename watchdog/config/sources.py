"""Where the engine signals come from (setting ``source`` and a target's ``source``): the cross-checks of the
Prometheus settings. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from watchdog.config.selectors import show
from watchdog.config.settings import BY_NAME
from watchdog.core.model import Target
from watchdog.core.promql import auth_problem, matchers_problem, pod_labels_problem, tenant_problem, url_problem

SOURCES = BY_NAME["source"].choices


def source_checks(v: Mapping[str, Any], targets: Sequence[Target]) -> list[str]:
    """source prometheus needs a usable prometheusUrl; the pod label names must be Prometheus label names, the
    extra matchers PromQL label matchers; one
    way to authenticate (a bearer token, or basic auth's username AND password); a query must fit in a cycle."""
    problems = []
    users = [t.name for t in targets if (t.source or v["source"]) == "prometheus"]
    url = v["prometheus_url"]
    if users and url is None:
        problems.append(f"source prometheus (targets {', '.join(users)}) needs prometheusUrl (e.g. "
                        "http://prometheus.monitoring:9090)")
    if url is not None and (problem := url_problem(str(url))):
        problems.append(f"prometheusUrl {show(url)} {problem}")
    if problem := pod_labels_problem(str(v["prometheus_namespace_label"]), str(v["prometheus_pod_label"])):
        problems.append(f"prometheusNamespaceLabel/prometheusPodLabel: {problem}")
    if problem := matchers_problem(str(v["prometheus_extra_matchers"])):
        problems.append(f"prometheusExtraMatchers {show(v['prometheus_extra_matchers'])} {problem}")
    if problem := auth_problem(v["prometheus_bearer_token_file"], v["prometheus_username_file"],
                               v["prometheus_password_file"]):
        problems.append(f"prometheusBearerTokenFile/prometheusUsernameFile/prometheusPasswordFile: {problem}")
    if v["prometheus_tenant"] is not None and (problem := tenant_problem(str(v["prometheus_tenant"]))):
        problems.append(f"prometheusTenant {show(v['prometheus_tenant'])} {problem}")
    if users and v["prometheus_timeout_seconds"] >= v["scrape_interval_seconds"]:
        problems.append(f"prometheusTimeoutSeconds ({v['prometheus_timeout_seconds']:g}) must be shorter than "
                        f"scrapeIntervalSeconds ({v['scrape_interval_seconds']:g})")
    return problems

"""Every query the watchdog can send, for every built-in profile, is PromQL a real Prometheus accepts (the unit
tiers evaluate them with a fake that only knows their shapes): unscoped, one pod's (``check --prometheus``), and a
namespace's pods as one regular expression with the extra matchers (a cycle's)."""

from __future__ import annotations

import pytest
from prom_kit import Server

from watchdog.core.profiles import PROFILES
from watchdog.core.promql import Scope, matchers, plan

pytestmark = pytest.mark.prometheus


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_query_of_every_profile_is_accepted_by_prometheus(prometheus: Server, name: str) -> None:
    profile = PROFILES[name]
    one = Scope("ns", ('a"b\\c',)).matchers("kubernetes_namespace", "kubernetes_pod_name")
    several = Scope("ns", ("llama.x-0", "a(b)|c*", 'q"\\')).matchers("namespace", "pod")  # escaped as RE2 literals
    queries = [*plan(profile, 60, "namespace", "pod").queries(),
               *plan(profile, 90.5, "kubernetes_namespace", "kubernetes_pod_name", one).queries(),
               *plan(profile, 60, "namespace", "pod", [*several, *matchers('cluster="prod-1",region=~"eu-.*"')]
                     ).queries()]
    assert len(queries) >= 6
    for query in queries:
        assert isinstance(prometheus.query(query), list), query  # raises on an error answer

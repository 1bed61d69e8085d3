"""Every query the watchdog can send, for every built-in profile, is PromQL a real Prometheus accepts (the unit
tiers evaluate them with a fake that only knows their shapes): the fleet's and the one pod's of the confirmation."""

from __future__ import annotations

import pytest
from prom_kit import PrometheusServer

from watchdog.core.profiles import PROFILES
from watchdog.core.promql import plan

pytestmark = pytest.mark.prometheus


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_query_of_every_profile_is_accepted_by_prometheus(prometheus: PrometheusServer, name: str) -> None:
    profile = PROFILES[name]
    queries = [*plan(profile, 60, "namespace", "pod").queries(),
               *plan(profile, 90.5, "kubernetes_namespace", "kubernetes_pod_name", {
                   "kubernetes_namespace": "ns", "kubernetes_pod_name": 'a"b\\c'}).queries()]
    assert len(queries) >= 6
    for query in queries:
        assert isinstance(prometheus.query(query), list), query  # raises on an error answer

"""``source: prometheus``: the engine signals of a cycle's pods read from Prometheus instead of their ``/metrics``.

Per cycle, :meth:`PrometheusSource.read_fleet` sends a CONSTANT number of instant queries for the whole fleet --
one per signal slot of each profile in use (identical ones once) plus one ``up`` -- whatever the number of pods
(:mod:`watchdog.core.promql` writes them and groups the answers per pod). Any failed query (unreachable, HTTP
error, timeout, body over the bound, ``status: error``, ``warnings``) makes the whole answer unusable: every
Prometheus pod is unknown that cycle. :meth:`PrometheusSource.read_pod` runs the same queries restricted to one
pod, for the confirmation right before a deletion.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from watchdog.adapters.logs import facts
from watchdog.adapters.prometheus import PrometheusClient, PrometheusError, PrometheusLimits
from watchdog.config.settings import Settings
from watchdog.controller.ports import Querier
from watchdog.controller.state import PodRecord
from watchdog.core.model import ScrapeTarget
from watchdog.core.parsing import ParseResult
from watchdog.core.profiles import Profile
from watchdog.core.promql import PodKey, PodReading, group_pods, reading_outcome, slot_queries, up_query

log = logging.getLogger("watchdog.controller.cycle")


@dataclass(frozen=True)
class FleetReading:
    """This cycle's answer: per profile, per (namespace, pod), the pod's reading; or ``error`` (one line)."""

    pods: dict[Profile, dict[PodKey, PodReading]]
    error: str = ""
    queries: int = 0


def client_from(config: Settings) -> PrometheusClient:
    """The bounded Prometheus client of ``config`` (prometheusUrl must be set)."""
    return PrometheusClient(PrometheusLimits(
        url=str(config.prometheus_url), timeout_s=config.prometheus_timeout_seconds,
        max_bytes=config.prometheus_max_bytes, bearer_token_file=config.prometheus_bearer_token_file,
        ca_file=config.prometheus_ca_file))


class PrometheusSource:
    """Reads the signals of Prometheus pods through ``client`` (a :class:`Querier`)."""

    def __init__(self, config: Settings, client: Querier) -> None:
        self.client = client
        self.staleness_s = config.prometheus_staleness_seconds
        self.namespace_label = config.prometheus_namespace_label
        self.pod_label = config.prometheus_pod_label

    def read_fleet(self, profiles: Iterable[Profile], at: float) -> FleetReading:
        """Every pod's reading for each of ``profiles``, queried at ``at`` (Unix seconds)."""
        return self._read(set(profiles), at, None)

    def read_pod(self, profile: Profile, namespace: str, name: str, at: float) -> PodReading | str | None:
        """One pod's fresh reading (None: no series), or why the queries failed (one line)."""
        restrict = {self.namespace_label: namespace, self.pod_label: name}
        fleet = self._read({profile}, at, restrict)
        if fleet.error:
            return fleet.error
        return fleet.pods[profile].get((namespace, name))

    def _read(self, profiles: set[Profile], at: float, restrict: dict[str, str] | None) -> FleetReading:
        ordered = sorted(profiles, key=lambda p: p.name)
        per_profile = {p: slot_queries(p, self.staleness_s, restrict) for p in ordered}
        up = up_query(self.staleness_s, self.pod_label, restrict)
        unique = list(dict.fromkeys([up, *(q for qs in per_profile.values() for q in qs if q is not None)]))
        try:
            answers = dict(zip(unique, self.client.query_many(unique, at), strict=True))
        except PrometheusError as exc:
            return FleetReading({}, str(exc), len(unique))
        pods = {p: group_pods(p, [None if q is None else answers[q] for q in queries], answers[up],
                              self.namespace_label, self.pod_label)
                for p, queries in per_profile.items()}
        return FleetReading(pods, "", len(unique))


#: What the cycle gets per pod: (scrape outcome, parsed signals or None, sample time on the monotonic clock or
#: None for "now", fresh: False when the pod's newest sample is the one already fed, so it is not fed again).
Read = tuple[str, ParseResult | None, float | None, bool]


def fleet_reads(source: PrometheusSource, targets: Sequence[ScrapeTarget], records: Mapping[str, PodRecord],
                profiles: Mapping[str, Profile], at: float, offset: float) -> dict[str, Read]:
    """Per pod UID, this cycle's :data:`Read` of the Prometheus ``targets``. ``at``: the wall clock (the query
    time); ``offset``: wall clock minus monotonic clock, fixed at start, which moves Prometheus' sample times
    onto the cycle's monotonic clock (their differences exactly as Prometheus stamped them)."""
    if not targets:
        return {}
    fleet = source.read_fleet({profiles[t.target] for t in targets}, at)
    if fleet.error:
        log.warning("Prometheus query failed: %s: the engines of its %d pods are unknown this cycle", fleet.error,
                    len(targets), extra=facts(result="prometheus_error", reason=fleet.error))
    out: dict[str, Read] = {}
    for target in targets:
        pod = records[target.uid]
        last = None if pod.sample_t is None else pod.sample_t - offset
        if fleet.error:
            pod.scrape_detail = fleet.error
            out[target.uid] = ("prometheus_error", None, last, True)
            continue
        reading = fleet.pods[profiles[target.target]].get((target.namespace, target.name))
        outcome, why = reading_outcome(reading, pod.sample_t)
        if outcome != "ok" or reading is None:
            pod.scrape_detail = why
            out[target.uid] = (outcome, None, last, True)
        elif why == "same":
            out[target.uid] = ("ok", reading.parsed, last, False)
        else:
            pod.sample_t = reading.t
            out[target.uid] = ("ok", reading.parsed, reading.t - offset, True)
    return out


def confirm_read(source: PrometheusSource, profile: Profile, target: ScrapeTarget, at: float,
                 ) -> tuple[str, ParseResult | None]:
    """The confirmation before a deletion: the same queries restricted to ``target``'s pod, fresh (not this
    cycle's answer). (outcome, parsed or None when unknown)."""
    reading = source.read_pod(profile, target.namespace, target.name, at)
    if isinstance(reading, str):
        log.info("pod %s: the confirming Prometheus query failed: %s", target.ref, reading,
                 extra=facts(target, result="prometheus_error", reason=reading))
        return "prometheus_error", None
    outcome, _ = reading_outcome(reading, None)
    return outcome, reading.parsed if outcome == "ok" and reading is not None else None

"""``source: prometheus``: the engine signals of a cycle's pods read from Prometheus instead of their ``/metrics``.

Per cycle, :meth:`PrometheusSource.read_fleet` sends a CONSTANT number of instant queries for the whole fleet --
one per signal slot of each profile in use plus the pods' sample times and ``up`` (identical ones once) --
whatever the number of pods. The time query runs alone before the others and again after them: an engine series
whose time differs between the two (Prometheus appended a scrape of its target while the values were being read,
so the values may be newer than the time) is held that cycle, never fed values under an older time
(:mod:`watchdog.core.promql` writes them and groups the answers per pod). Any failed query (unreachable, HTTP
error, timeout, body over the bound, ``status: error``, ``warnings``) makes the whole answer unusable: every
Prometheus pod is unknown that cycle. :meth:`PrometheusSource.read_pod` runs the same queries restricted to one
pod, for the confirmation right before a deletion.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from watchdog.adapters.logs import facts
from watchdog.adapters.prometheus import PrometheusClient, PrometheusError, PrometheusLimits
from watchdog.config.settings import Settings
from watchdog.core.lines import Labels
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import ParseResult
from watchdog.core.profiles import Profile
from watchdog.core.promql import Plan, PodKey, PodReading, Reading, plan, reading_outcome

if TYPE_CHECKING:  # types only: `check --prometheus` must not import the Kubernetes client
    from watchdog.controller.ports import Querier
    from watchdog.controller.state import PodRecord

log = logging.getLogger("watchdog.controller.cycle")


@dataclass(frozen=True)
class FleetReading:
    """This cycle's answer: per profile, per (namespace, pod), the pod's reading; or ``error`` (one line)."""

    pods: dict[Profile, dict[PodKey, PodReading]]
    error: str = ""


def client_from(config: Settings) -> PrometheusClient:
    """The bounded Prometheus client of ``config`` (prometheusUrl must be set)."""
    return PrometheusClient(PrometheusLimits(
        url=str(config.prometheus_url), timeout_s=config.prometheus_timeout_seconds,
        max_bytes=config.prometheus_max_bytes, bearer_token_file=config.prometheus_bearer_token_file,
        ca_file=config.prometheus_ca_file, username_file=config.prometheus_username_file,
        password_file=config.prometheus_password_file, tenant=config.prometheus_tenant))


class PrometheusSource:
    """Reads the signals of Prometheus pods through ``client`` (a :class:`Querier`)."""

    def __init__(self, client: Querier, staleness_s: float, namespace_label: str, pod_label: str,
                 timeout_s: float | None = None) -> None:
        self.client = client
        self.timeout_s = timeout_s  # one deadline for a reading's batches of queries (None: one per batch)
        self.staleness_s = staleness_s
        self.namespace_label = namespace_label
        self.pod_label = pod_label
        self._fleet_plans: dict[Profile, Plan] = {}  # the fleet queries depend on the profile and settings only

    @classmethod
    def from_settings(cls, config: Settings, client: Querier) -> PrometheusSource:
        return cls(client, config.prometheus_staleness_seconds, config.prometheus_namespace_label,
                   config.prometheus_pod_label, config.prometheus_timeout_seconds)

    def read_fleet(self, profiles: Iterable[Profile], at: float) -> FleetReading:
        """Every pod's reading for each of ``profiles``, queried at ``at`` (Unix seconds)."""
        return self._read(set(profiles), at, None, bracket=True)

    def read_pod(self, profile: Profile, namespace: str, name: str, at: float) -> PodReading | str | None:
        """One pod's fresh reading (None: no series), or why the queries failed (one line)."""
        restrict = {self.namespace_label: namespace, self.pod_label: name}
        fleet = self._read({profile}, at, restrict)
        if fleet.error:
            return fleet.error
        return fleet.pods[profile].get((namespace, name))

    def _plan(self, profile: Profile, restrict: dict[str, str] | None) -> Plan:
        if restrict is not None:
            return plan(profile, self.staleness_s, self.namespace_label, self.pod_label, restrict)
        if profile not in self._fleet_plans:
            self._fleet_plans[profile] = plan(profile, self.staleness_s, self.namespace_label, self.pod_label)
        return self._fleet_plans[profile]

    def _read(self, profiles: set[Profile], at: float, restrict: dict[str, str] | None,
              bracket: bool = False) -> FleetReading:
        """The readings of ``profiles``; ``bracket``: the time queries before and after the others (module
        docstring), else every query at once."""
        readings = [Reading(p, self._plan(p, restrict)) for p in sorted(profiles, key=lambda p: p.name)]
        unique = list(dict.fromkeys((q, r.plan.labels_of(q)) for r in readings for q in r.plan.queries()))
        times = [u for u in unique if any(u[0] == r.plan.time for r in readings)]
        batches = [times, [u for u in unique if u not in times], times] if bracket else [unique]
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        try:
            for batch in batches:
                for index, rows in self.client.query_each(batch, at, deadline):  # each answer folded in, dropped
                    query, labels = batch[index]
                    for reading in readings:
                        if reading.plan.labels_of(query) == labels:
                            reading.add(query, rows)
                    del rows
        except PrometheusError as exc:
            return FleetReading({}, str(exc))
        except Exception as exc:  # a bug reading one answer must not stop the cycle of every other pod: unknown
            log.exception("reading Prometheus' answers failed unexpectedly")
            return FleetReading({}, f"unexpected {type(exc).__name__} reading Prometheus' answers: {exc}"[:400])
        return FleetReading({r.profile: r.pods() for r in readings})


#: What the cycle gets per pod: (scrape outcome, parsed signals or None, sample time on the monotonic clock or
#: None for "now", each engine series' own sample time on the monotonic clock by its labels -- None: not to be
#: fed this cycle (its time moved while its values were read) -- or None when every engine is at the sample time:
#: a scraped body). The cycle feeds an engine series only when its time moved on since it was last fed.
Read = tuple[str, ParseResult | None, float | None, Mapping[Labels, float | None] | None]


def fleet_reads(source: PrometheusSource, targets: Sequence[WatchedPod], records: Mapping[str, PodRecord],
                profiles: Mapping[str, Profile], at: float, offset: float) -> dict[str, Read]:
    """Per pod UID, this cycle's :data:`Read` of the Prometheus ``targets``. ``at``: the wall clock (the query
    time); ``offset``: wall clock minus monotonic clock, fixed at start, which moves Prometheus' sample times
    onto the cycle's monotonic clock (their differences exactly as Prometheus stamped them)."""
    if not targets:
        return {}
    fleet = source.read_fleet({profiles[t.target_name] for t in targets}, at)
    if fleet.error:
        log.warning("Prometheus query failed: %s: the engines of its %d pods are unknown this cycle", fleet.error,
                    len(targets), extra=facts(result="prometheus_error", reason=fleet.error))
    out: dict[str, Read] = {}
    for target in targets:
        pod = records[target.uid]
        last = None if pod.sample_t is None else pod.sample_t - offset
        if fleet.error:
            pod.scrape_detail = fleet.error
            out[target.uid] = ("prometheus_error", None, last, None)
            continue
        reading = fleet.pods[profiles[target.target_name]].get((target.namespace, target.name))
        outcome, why = reading_outcome(reading)
        if outcome != "ok" or reading is None or reading.t is None:
            pod.scrape_detail = why
            out[target.uid] = (outcome, None, last, None)
            continue
        newest = reading.t if pod.sample_t is None else max(reading.t, pod.sample_t)
        pod.sample_t = newest
        stamps = {labels: None if labels in reading.moved else t - offset for labels, t in reading.times.items()}
        out[target.uid] = ("ok", reading.parsed, newest - offset, stamps)
    return out


def confirm_read(source: PrometheusSource, profile: Profile, target: WatchedPod, at: float,
                 ) -> tuple[str, ParseResult | None]:
    """The confirmation before a deletion: the same queries restricted to ``target``'s pod, fresh (not this
    cycle's answer). (outcome, parsed or None when unknown)."""
    reading = source.read_pod(profile, target.namespace, target.name, at)
    if isinstance(reading, str):
        log.info("pod %s: the confirming Prometheus query failed: %s", target.ref, reading,
                 extra=facts(target, result="prometheus_error", reason=reading))
        return "prometheus_error", None
    outcome, _ = reading_outcome(reading)
    return outcome, reading.parsed if outcome == "ok" and reading is not None else None

"""``source: prometheus``: the engine signals of a cycle's pods read from Prometheus instead of their ``/metrics``.

Per cycle, :meth:`PrometheusSource.read_fleet` sends a CONSTANT number of instant queries for the whole fleet --
one per signal slot of each profile in use plus the pods' sample times and ``up`` (identical ones once) --
whatever the number of pods. The time query runs alone before the others and again after them: an engine series
whose time differs between the two (Prometheus appended a scrape of its target while the values were being read,
so the values may be newer than the time) is held that cycle, never fed values under an older time
(:mod:`watchdog.core.promql` writes them and groups the answers per pod). Any failed query (unreachable, HTTP
error, timeout, body over the bound, ``status: error``, ``warnings``) makes the whole answer unusable: every
Prometheus pod is unknown that cycle. :meth:`PrometheusSource.read_pod` runs the same queries restricted to one
pod, for the confirmation right before a deletion (:meth:`PrometheusSource.confirm`).

As a :class:`~watchdog.controller.ports.Source`, Prometheus' sample times are moved onto the cycle's monotonic
clock (``offset``: wall clock minus monotonic clock, fixed at start; their differences exactly as Prometheus stamped
them), and a sample already fed is not fed again (each reading's ``mark``: the newest sample time fed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from watchdog.adapters.logs import facts
from watchdog.adapters.promdecode import PrometheusError
from watchdog.controller.reading import Reading
from watchdog.core.model import WatchedPod
from watchdog.core.profiles import Profile
from watchdog.core.promql import Plan, PodKey, PodReading, plan, reading_outcome
from watchdog.core.promql import Reading as Answers

if TYPE_CHECKING:  # types only: `check --prometheus` must not import the Kubernetes client
    from watchdog.controller.ports import Clock, Querier
    from watchdog.controller.state import PodRecord

log = logging.getLogger(__name__)
_WHAT = "reading it from Prometheus"


@dataclass(frozen=True)
class FleetReading:
    """This cycle's answer: per profile, per (namespace, pod), the pod's reading; or ``error`` (one line)."""

    pods: dict[Profile, dict[PodKey, PodReading]]
    error: str = ""


class PrometheusSource:
    """Reads the signals of Prometheus pods through ``client`` (a :class:`Querier`); as a Source, of the targets'
    ``profiles`` (target name -> profile), queried at ``wall_clock`` (Unix s)."""

    def __init__(self, client: Querier, staleness_s: float, namespace_label: str, pod_label: str,
                 timeout_s: float | None = None, *, profiles: Mapping[str, Profile] | None = None,
                 wall_clock: Clock = time.time, offset: float = 0.0, where: str = "prometheus") -> None:
        self.client = client
        self.where = where  # "prometheus (URL)": what it reads, for people (/readyz, the log)
        self.timeout_s = timeout_s  # one deadline for a reading's batches of queries (None: one per batch)
        self.staleness_s = staleness_s
        self.namespace_label = namespace_label
        self.pod_label = pod_label
        self.profiles, self.wall_clock, self.offset = profiles or {}, wall_clock, offset
        self._fleet_plans: dict[Profile, Plan] = {}  # the fleet queries depend on the profile and settings only

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
        readings = [Answers(p, self._plan(p, restrict)) for p in sorted(profiles, key=lambda p: p.name)]
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

    # -- the Source ---------------------------------------------------------------------------------------------
    def start(self, pods: Sequence[tuple[WatchedPod, PodRecord]]) -> Callable[[], Mapping[str, Reading]]:
        """The readings are made when asked for, in the caller's thread (while the scrapes run on their loop)."""
        return lambda: self.read_pods(pods, self.wall_clock())

    def read_pods(self, pods: Sequence[tuple[WatchedPod, PodRecord]], at: float) -> dict[str, Reading]:
        """Per pod UID, this cycle's reading of ``pods``, queried at ``at`` (the wall clock)."""
        if not pods:
            return {}
        offset = self.offset
        fleet = self.read_fleet({self.profiles[t.target_name] for t, _ in pods}, at)
        if fleet.error:
            log.warning("Prometheus query failed: %s: the engines of its %d pods are unknown this cycle", fleet.error,
                        len(pods), extra=facts(result="prometheus_error", reason=fleet.error))
        out: dict[str, Reading] = {}
        for target, record in pods:
            last = None if record.mark is None else record.mark - offset
            if fleet.error:
                out[target.uid] = Reading("prometheus_error", detail=fleet.error, what=_WHAT, t=last)
                continue
            reading = fleet.pods[self.profiles[target.target_name]].get((target.namespace, target.name))
            outcome, why = reading_outcome(reading)
            if outcome != "ok" or reading is None or reading.t is None:
                out[target.uid] = Reading(outcome, detail=why, what=_WHAT, t=last)
                continue
            newest = reading.t if record.mark is None else max(reading.t, record.mark)
            stamps = {labels: None if labels in reading.moved else t - offset for labels, t in reading.times.items()}
            out[target.uid] = Reading("ok", reading.parsed, t=newest - offset, stamps=stamps, mark=newest)
        return out

    def confirm(self, pod: WatchedPod) -> Reading:
        """The confirmation before a deletion: the same queries restricted to ``pod``, fresh (not this cycle's
        answer)."""
        reading = self.read_pod(self.profiles[pod.target_name], pod.namespace, pod.name, self.wall_clock())
        if isinstance(reading, str):
            log.info("pod %s: the confirming Prometheus query failed: %s", pod.ref, reading,
                     extra=facts(pod, result="prometheus_error", reason=reading))
            return Reading("prometheus_error", detail=reading, what=_WHAT)
        outcome, why = reading_outcome(reading)
        if outcome == "ok" and reading is not None:
            return Reading(outcome, reading.parsed)
        return Reading(outcome, detail=why, what=_WHAT)

    def probe(self) -> tuple[str, str] | None:
        """One constant query (``vector(1)``) when no pod was due: a Prometheus that cannot be queried at all
        (a wrong prometheusUrl, credentials, TLS) shows before any namespace is opted in."""
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        try:
            for _ in self.client.query_each([("vector(1)", ())], self.wall_clock(), deadline):
                pass
        except PrometheusError as exc:
            return "prometheus_error", f"{_WHAT}: {exc}"
        return "ok", ""

    def close(self) -> None:
        """Nothing to release: every query opens and closes its own connection."""

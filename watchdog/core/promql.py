"""PURE: the stall signals read from Prometheus instead of a pod's ``/metrics`` (``source: prometheus``).

Per cycle and profile, :func:`slot_queries` gives ONE instant query per signal slot of the profile (the same
slots, in the same order, as :func:`watchdog.core.parsing.signal_slots`) for the whole fleet, plus one
:func:`up_query`; the count never depends on the number of pods. Each query is a range selector over the last
``staleness`` seconds, e.g. ``vllm:num_requests_running[60s]``: its matrix answer carries every series' raw
samples with Prometheus' own timestamps, and a series with no sample in that range is simply absent (a series
whose newest sample is older than the bound is unknown, never evidence). The confirmation before a deletion
runs the same queries restricted to one pod (``restrict``).

:func:`group_pods` keeps each series' newest sample, splits the series by the pod labels (``namespace``,
``pod`` by default: what Kubernetes service discovery adds) and hands each pod's samples to the parser's own
aggregation (:func:`watchdog.core.parsing.aggregate_samples`: engine series keyed by the profile's engine labels,
summed over other labels, the largest over collapse labels). A pod's sample time is the newest sample timestamp
among its series (Prometheus' clock, seconds). :func:`reading_outcome` says what the cycle does with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from watchdog.core.parsing import ParseResult, aggregate_samples, signal_slots
from watchdog.core.profiles import Profile, Selector

__all__ = ["PodKey", "PodReading", "Series", "group_pods", "reading_outcome", "slot_queries", "up_query", "url_problem"]

#: One decoded series of a query answer: its labels and its samples as (Unix seconds, value).
Series = tuple[Mapping[str, str], Sequence[tuple[float, float]]]
PodKey = tuple[str, str]  # (namespace, pod name)


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a usable Prometheus base URL (``http(s)://host[:port][/path]``), or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"is not a URL: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be http(s)://HOST[:PORT][/PATH]"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (they would be logged): use prometheusBearerTokenFile"
    if parts.query or parts.fragment:
        return "must not have a query or fragment"
    return None


def quote(value: str) -> str:
    """A PromQL double-quoted string literal of ``value``."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _range(metric: str, matchers: Sequence[str], staleness_s: float) -> str:
    inner = ",".join(matchers)
    return f"{metric}{{{inner}}}[{_seconds(staleness_s)}]" if inner else f"{metric}[{_seconds(staleness_s)}]"


def _seconds(value: float) -> str:
    """A PromQL duration: whole seconds, or milliseconds when fractional (at least 1 ms)."""
    if float(value).is_integer():
        return f"{int(value)}s"
    return f"{max(1, round(value * 1000))}ms"


def _restrict(restrict: Mapping[str, str] | None) -> list[str]:
    return [f"{name}={quote(value)}" for name, value in sorted((restrict or {}).items())]


def selector_query(selector: Selector, staleness_s: float, restrict: Mapping[str, str] | None = None) -> str:
    """``NAME{matchers}[<staleness>s]`` for one selector; ``restrict``: extra equality matchers (one pod)."""
    matchers = [f"{name}{'=' if equal else '!='}{quote(value)}" for name, value, equal in selector.match]
    return _range(selector.metric, [*matchers, *_restrict(restrict)], staleness_s)


def slot_queries(profile: Profile, staleness_s: float,
                 restrict: Mapping[str, str] | None = None) -> list[str | None]:
    """One range query per signal slot of ``profile`` (None where the slot has no selector, e.g. no waiting)."""
    return [None if s is None else selector_query(s, staleness_s, restrict) for s in signal_slots(profile)]


def up_query(staleness_s: float, pod_label: str, restrict: Mapping[str, str] | None = None) -> str:
    """``up{<pod label>!=""}[<staleness>s]``: every pod target's health over the staleness bound."""
    return _range("up", [*([f'{pod_label}!=""'] if not restrict else []), *_restrict(restrict)], staleness_s)


@dataclass(frozen=True)
class PodReading:
    """One pod's signals from Prometheus: ``parsed`` as if its ``/metrics`` had been scraped, ``t`` the newest
    sample time among its series (Unix seconds, Prometheus' clock), ``down``: one of its targets' newest ``up``
    sample reads 0 (or is not a number)."""

    parsed: ParseResult
    t: float
    down: bool = False


@dataclass
class _Pod:
    slots: list[list[tuple[Mapping[str, str], float]]]
    t: float = -math.inf
    labels: dict[str, str] = field(default_factory=dict)


def _newest(samples: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    best: tuple[float, float] | None = None
    for t, value in samples:
        if best is None or t > best[0]:
            best = (t, value)
    return best


def group_pods(profile: Profile, slot_series: Sequence[Sequence[Series] | None], up: Sequence[Series],
               namespace_label: str, pod_label: str) -> dict[PodKey, PodReading]:
    """Per (namespace, pod): the engine series of ``profile`` from each slot's decoded answer (``slot_series[i]``
    for :func:`slot_queries` ``[i]``; None or empty for none), and whether ``up`` says its target is down.

    Each series contributes its newest sample; series without both pod labels are ignored. Pods that appear
    only in ``up`` are left out (no signal: unknown)."""
    pods: dict[PodKey, _Pod] = {}
    for index, answer in enumerate(slot_series):
        for labels, samples in answer or ():
            newest = _newest(samples)
            namespace, pod = labels.get(namespace_label), labels.get(pod_label)
            if newest is None or not namespace or not pod:
                continue
            entry = pods.setdefault((namespace, pod), _Pod([[] for _ in slot_series]))
            entry.slots[index].append(({k: v for k, v in labels.items() if k != "__name__"}, newest[1]))
            entry.t = max(entry.t, newest[0])
    down: set[PodKey] = set()
    for labels, samples in up:
        newest = _newest(samples)
        namespace, pod = labels.get(namespace_label), labels.get(pod_label)
        if newest is not None and namespace and pod and not newest[1] > 0:
            down.add((namespace, pod))
    return {key: PodReading(aggregate_samples(entry.slots, profile), entry.t, key in down)
            for key, entry in pods.items()}


def reading_outcome(reading: PodReading | None, previous_t: float | None) -> tuple[str, str]:
    """What the cycle does with one pod's reading: ``("ok", "")`` feed it to the detector; ``("ok", "same")``
    its newest sample is the one already fed (do not feed it again: a sample seen twice would count as a busy
    sample without progress); ``("prometheus_unknown", why)`` unknown this cycle."""
    if reading is None or not reading.parsed.series:
        return "prometheus_unknown", "no series of the profile in Prometheus within the staleness bound"
    if reading.down:
        return "prometheus_unknown", "Prometheus' newest up sample of its target is 0 (its scrapes fail)"
    if previous_t is not None and reading.t <= previous_t:
        return "ok", "same"
    return "ok", ""

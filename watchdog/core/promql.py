"""PURE: the stall signals read from Prometheus instead of a pod's ``/metrics`` (``source: prometheus``).

Per cycle and profile, :func:`plan` writes a CONSTANT number of instant queries for the whole fleet, whatever
the number of pods: one per signal slot of the profile (the slots of :func:`watchdog.core.parsing.signal_slots`),
one for the pods' sample times and one for their targets' ``up``. Each slot query lets Prometheus do the
volume work of the parser's aggregation, so its answer holds one small row per pod and engine series::

    max by (namespace, pod, <engine labels>, <matcher labels>) (
      sum by (namespace, pod, <engine labels>, <matcher labels>, <collapse labels>, <target labels>) (
        last_over_time(vllm:generation_tokens_total[60s]) and vllm:generation_tokens_total))

``last_over_time(...[staleness])`` is each series' newest sample no older than the staleness bound (an older
series is absent: unknown, never evidence). Alone it would keep answering a series' last value for the whole
bound after the series left its target's ``/metrics`` -- an engine gone from a pod whose other engines go on, so
that the pod's time advances: its frozen values fed as fresh samples would stall it -- because it skips the
staleness marker Prometheus writes at the first scrape without the series. ``and <selector>`` (the instant
selector, which honours that marker) drops such a series at that scrape, as a direct scrape would not see it;
a pod whose target is gone or failing gets markers for every series too. ``sum by`` drops the labels no engine
is keyed by (finish reason, LoRA adapter ...) within one scrape target and ``max by`` takes the largest over the
collapse labels (SGLang's tensor-parallel ranks), as the parser does, and over the scrape targets
(:data:`TARGET_LABELS`: ``job``, ``instance``, ``endpoint``, ``container``, ``service``): a pod scraped by two
jobs (a ServiceMonitor and a PodMonitor) would otherwise read its values doubled, and each time the slower job's
sample aged out of the range its counters would fall -- a counter reset, read as progress, so that its stall was
never seen. The rows then go through the parser's own
last step (:func:`watchdog.core.parsing.engine_series`: one rule in one place). The matcher labels are kept
so that rows of a ``!=`` matcher stay rows of the right series (they are summed like any other label).
A pod-scoped series (none of the engine labels: vLLM's ``rl_weight_update_operations_in_flight{operation}`` and
``sleep_mode_operations_in_flight{operation}``) gives a row with only the pod labels; like the pod-scoped label
set of a scraped body, ``engine_series`` applies it to every engine series of that pod (a pause pauses them all),
whichever of the pod's scrape targets it came from. Having no engine label, it has no time of its own to be
checked against its target's latest scrape (below): the ``and`` drops it at its staleness marker, but a sample
with an explicit timestamp that left ``/metrics`` is read until it ages past the staleness bound.

Each engine series is fed to the detector at its own sample time, Prometheus' own time of its newest running
sample, so detection does not depend on when the watchdog asked, and the engines of one pod scraped as two
targets (two ports, two containers) are each read at their own scrape's time::

    max by (namespace, pod, <engine labels>) (
      timestamp(R) >= ignoring(<engine labels>, <collapse labels>) group_left
      max without (<engine labels>, <collapse labels>) (timestamp(R)))

where ``R`` is the running selector. The right side is the newest running sample of each scrape target: a target
is whatever label set is left without the engine's own labels (``job``, ``instance``, ``endpoint``,
``container`` ... however the operator relabels them). An engine series whose newest running sample is older than
its target's newest was not in the target's latest scrape (it left ``/metrics`` without a staleness marker:
samples with explicit timestamps, federation): the comparison drops it, so that its last values are never fed
again as fresh samples while the target's other engines go on (unknown). ``timestamp`` looks back at most
Prometheus' lookback delta (5 minutes by default), hence the staleness bound's maximum of 300 s. ``up`` is
``min by (namespace, pod) (last_over_time(up{pod!=""}[60s]))``: one failing target of the pod makes it
down. The confirmation before a deletion runs the same queries restricted to one pod (``restrict``).
:class:`Answers` folds the answers per pod as they arrive; :func:`reading_outcome` says what the cycle does.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from watchdog.core.lines import Labels
from watchdog.core.parsing import ParseResult, engine_series, escape_label_value, signal_slots
from watchdog.core.profiles import Profile, Selector, label_name_problem

__all__ = [
    "Answers",
    "Names",
    "Plan",
    "PodKey",
    "PodReading",
    "Scope",
    "Series",
    "auth_problem",
    "instance_host",
    "matchers",
    "matchers_problem",
    "plan",
    "pod_labels_problem",
    "reading_outcome",
    "scopes",
    "tenant_problem",
    "url_problem",
]

#: The labels Prometheus (and Kubernetes service discovery) give every series of one scrape target: a pod scraped
#: by two jobs (a ServiceMonitor and a PodMonitor), two Services or two endpoints has each series twice; the
#: largest of the copies is taken, never their sum (module docstring). Copies apart only by another label, of a
#: relabelling of your own, are summed like any label no engine is keyed by.
TARGET_LABELS = ("job", "instance", "endpoint", "container", "service")

#: The label naming a series' scrape identity: the ``host:port`` Prometheus scraped (Kubernetes service discovery
#: sets it to the pod's IP and port). A row is evidence about a pod only when its host is the pod's IP from the API
#: server (:class:`Answers`'s ``ips``), and two instances claiming one engine series of a pod are a conflict.
INSTANCE = "instance"

#: The bytes of the pod-name regular expression of one scoped query (:func:`scopes`): a namespace with more watched
#: pods is read in several chunks, each its own queries (Prometheus' form limit and its regex cost both grow with it).
MAX_POD_REGEX = 4096

#: One row of an instant query's answer: the values of the label names the query's rows are read by
#: (:meth:`Plan.labels_of`; None where the row has no such label) and its value.
Series = tuple[tuple[str | None, ...], float]
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
        return "must not carry credentials (they would be logged): use a bearer token or basic auth file"
    if parts.query or parts.fragment:
        return "must not have a query or fragment"
    return None


def auth_problem(bearer_token_file: str | None, username_file: str | None, password_file: str | None) -> str | None:
    """Why these credential files are not one way to authenticate to Prometheus, or None."""
    if (username_file is None) != (password_file is None):
        return "basic auth needs both a username file and a password file"
    if username_file is not None and bearer_token_file is not None:
        return "a bearer token file and basic auth exclude each other (one Authorization header)"
    return None


def tenant_problem(tenant: str) -> str | None:
    """Why ``tenant`` cannot be an X-Scope-OrgID header value, or None."""
    return None if 0 < len(tenant) <= 256 and tenant.isprintable() else "must be 1-256 printable characters"


def pod_labels_problem(namespace_label: str, pod_label: str) -> str | None:
    """Why the two labels cannot identify a pod's series, or None."""
    for label in (namespace_label, pod_label):
        if problem := label_name_problem(label):
            return f"{label!r} {problem}"
    return "the namespace and pod labels must differ" if namespace_label == pod_label else None


_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\\n]|\\.)*)"\s*')


def matchers_problem(text: str) -> str | None:
    """Why ``text`` is not a comma-separated list of PromQL label matchers (``cluster="prod-1",region=~"eu-.*"``),
    or None."""
    position, expected = 0, bool(text.strip())
    while expected:
        match = _MATCHER.match(text, position)
        if match is None:
            return f"is not a list of label matchers like cluster=\"prod-1\" (at {text[position:position + 40]!r})"
        if problem := label_name_problem(match.group(1)):
            return f"{match.group(1)!r} {problem}"
        position = match.end()
        expected = text.startswith(",", position)  # another matcher after a comma, else the end
        position += expected
        if not expected and position < len(text):
            return f"is not a list of label matchers like cluster=\"prod-1\" (at {text[position:position + 40]!r})"
    return None


def matchers(text: str) -> tuple[str, ...]:
    """The matchers of ``text`` (checked by :func:`matchers_problem`), each as ``name op "value"``."""
    return tuple(f'{m.group(1)}{m.group(2)}"{m.group(3)}"' for m in _MATCHER.finditer(text))


def instance_host(instance: str) -> str:
    """The host of an ``instance`` label: ``10.0.0.5:8000`` -> ``10.0.0.5``, ``[fd00::1]:8000`` -> ``fd00::1``."""
    if instance.startswith("["):
        return instance[1:].partition("]")[0]
    host, colon, port = instance.rpartition(":")
    return host if colon and port.isdigit() and ":" not in host else instance


@dataclass(frozen=True)
class Scope:
    """The pods one set of queries reads: ``pods`` (names) of ``namespace``."""

    namespace: str
    pods: tuple[str, ...]

    def matchers(self, namespace_label: str, pod_label: str) -> list[str]:
        """The matchers selecting exactly these pods' series: the namespace, and the pod (one name, or a regex of
        them, fully anchored by Prometheus, metacharacters escaped)."""
        pods = (f"{pod_label}={quote(self.pods[0])}" if len(self.pods) == 1 else
                f"{pod_label}=~{quote('|'.join(_escape(p) for p in self.pods))}")
        return [f"{namespace_label}={quote(self.namespace)}", pods]


_REGEX_META = re.compile(r"([\\.+*?()|\[\]{}^$])")


def _escape(name: str) -> str:
    """``name`` as a literal in a (RE2) regular expression."""
    return _REGEX_META.sub(r"\\\1", name)


def scopes(pods: Iterable[PodKey], max_regex: int = MAX_POD_REGEX) -> list[Scope]:
    """``pods`` grouped per namespace, each namespace's names in chunks whose regex stays within ``max_regex``
    bytes: one scope each (sorted, so that a pod keeps its chunk while the fleet does not change)."""
    by_namespace: dict[str, list[str]] = {}
    for namespace, name in sorted(set(pods)):
        by_namespace.setdefault(namespace, []).append(name)
    out = []
    for namespace, names in by_namespace.items():
        chunk: list[str] = []
        size = 0
        for name in names:
            length = len(_escape(name)) + 1
            if chunk and size + length > max_regex:
                out.append(Scope(namespace, tuple(chunk)))
                chunk, size = [], 0
            chunk.append(name)
            size += length
        out.append(Scope(namespace, tuple(chunk)))
    return out


def quote(value: str) -> str:
    """A PromQL double-quoted string literal of ``value`` (escaped as the exposition format does)."""
    return f'"{escape_label_value(value)}"'


def _seconds(value: float) -> str:
    """A PromQL duration: whole seconds, or milliseconds when fractional (at least 1 ms)."""
    if float(value).is_integer():
        return f"{int(value)}s"
    return f"{max(1, round(value * 1000))}ms"


def _selector(metric: str, matchers: Sequence[str]) -> str:
    return f"{metric}{{{','.join(matchers)}}}" if matchers else metric


def _series(selector: Selector, scope: Sequence[str]) -> str:
    """``selector`` as a PromQL series selector, plus the ``scope`` matchers."""
    matchers = [f"{name}{'=' if equal else '!='}{quote(value)}" for name, value, equal in selector.match]
    return _selector(selector.metric, [*matchers, *scope])


def _by(labels: Sequence[str]) -> str:
    return ", ".join(labels)


@dataclass(frozen=True)
class Plan:
    """The instant queries of one profile: ``slots[i]`` for signal slot ``i`` (None: the slot has no selector),
    ``time`` the pods' newest running sample times, ``up`` their targets' health. ``identity``: the label names
    that name one engine series in a slot's rows (namespace, pod, then the engine labels, sorted); every row also
    carries its :data:`INSTANCE`."""

    slots: tuple[str | None, ...]
    time: str
    up: str
    identity: tuple[str, ...] = ()

    def queries(self) -> list[str]:
        """Every query of the plan, each once."""
        return list(dict.fromkeys([self.up, self.time, *(q for q in self.slots if q is not None)]))

    def labels_of(self, query: str) -> tuple[str, ...]:
        """The label names whose values :meth:`Answers.add` reads from ``query``'s rows: namespace, pod and instance
        for the ``up`` query, :attr:`identity` and instance for a slot's and the time query's."""
        return (*self.identity[:2], INSTANCE) if query == self.up else (*self.identity, INSTANCE)


def slot_query(selector: Selector, profile: Profile, staleness_s: float, namespace_label: str, pod_label: str,
               scope: Sequence[str] = ()) -> str:
    """The query of one signal slot (see the module docstring); ``scope``: extra matchers."""
    series = _series(selector, scope)
    latest = f"last_over_time({series}[{_seconds(staleness_s)}]) and {series}"  # see the module docstring
    keep = list(dict.fromkeys([namespace_label, pod_label, *sorted(profile.engine_labels),
                               *(name for name, _, _ in selector.match)]))
    collapse = [name for name in sorted(profile.collapse_labels) if name not in keep]
    targets = [name for name in TARGET_LABELS if name not in keep and name not in collapse]
    return f"max by ({_by([*keep, INSTANCE])}) (sum by ({_by([*keep, *collapse, *targets])}) ({latest}))"


def plan(profile: Profile, staleness_s: float, namespace_label: str, pod_label: str,
         scope: Sequence[str] = ()) -> Plan:
    """The queries of ``profile``, each with the ``scope`` matchers (the pods of one :class:`Scope`, the
    configured extra matchers; none: every pod Prometheus holds)."""
    slots = tuple(None if s is None else slot_query(s, profile, staleness_s, namespace_label, pod_label, scope)
                  for s in signal_slots(profile))
    pods = _by([namespace_label, pod_label, INSTANCE])
    identity = tuple(dict.fromkeys([namespace_label, pod_label, *sorted(profile.engine_labels)]))
    own = _by([n for n in [*sorted(profile.engine_labels), *sorted(profile.collapse_labels)]
               if n not in (namespace_label, pod_label)])  # the engine's own labels: the rest name its target
    stamps = f"timestamp({_series(profile.running, scope)})"
    time = (f"max by ({_by([*identity, INSTANCE])}) ({stamps} >= ignoring({own}) group_left max without ({own}) "
            f"({stamps}))")
    up_matchers = list(scope) or [f'{pod_label}!=""']
    up = f"min by ({pods}) (last_over_time({_selector('up', up_matchers)}[{_seconds(staleness_s)}]))"
    return Plan(slots, time, up, identity)


@dataclass(frozen=True)
class PodReading:
    """One pod's signals from Prometheus: ``parsed`` as if its ``/metrics`` had been scraped, ``down``: one of its
    targets' newest ``up`` sample reads 0 (or is not a number), ``times`` each engine series' own newest running
    sample time (Unix seconds, Prometheus' clock, by its labels; the time to feed it at), ``moved``: the engine
    series whose time was different when the time query ran again after the value queries (a scrape of its
    target landed while they ran: its values may be newer than its time; not to be fed this cycle);
    ``conflict``: why its series are not one pod's (two instances claim one engine series), or ``""``; ``ports``:
    the ports of the instances its engine series were scraped from (their host checked to be the pod's IP; empty
    when not checked)."""

    parsed: ParseResult
    down: bool = False
    times: Mapping[Labels, float] = field(default_factory=dict)
    moved: frozenset[Labels] = frozenset()
    conflict: str = ""
    ports: frozenset[int] = frozenset()

    @property
    def t(self) -> float | None:
        """The pod's time: its newest running sample (None: Prometheus gave none)."""
        return max(self.times.values(), default=None)


_NO_SERIES = ParseResult((), 0, frozenset())


#: What one row identity names, whichever pod IPs are watched (:meth:`Answers._names_of`).
Names = tuple[tuple[str | None, ...], PodKey | None, Labels, str | None]


class _Named:
    """One engine series of one pod as the rows of :class:`Answers` name it: its pod, its engine series key and
    (once a slot row of it came) its slots' values from the instance of those rows."""

    __slots__ = ("key", "pod", "row")

    def __init__(self, pod: PodKey, key: Labels) -> None:
        self.pod, self.key = pod, key
        self.row: list[float | None] | None = None


class Answers:
    """The answers to one profile's :class:`Plan`, folded in as they arrive (:meth:`add`; the rows can be dropped
    right after), then :meth:`pods`: per (namespace, pod) its engine series, sample time and ``up``.

    A slot row is already one engine series of one pod and scrape :data:`INSTANCE` (the query summed and took the
    largest as the parser does); rows of one slot that differ only by a label of the selector's matchers (not
    read: see :meth:`Plan.labels_of`) are summed, as the parser sums over labels no engine is keyed by. A row is
    evidence about its pod only when its instance's host is the pod's IP in ``ips`` (the API server's; None: not
    checked): any other row -- a series labelled with a pod it was not scraped from -- is dropped (counted in
    :attr:`dropped`, once per series). An engine series claimed by two instances is a :attr:`PodReading.conflict`:
    the pod is unknown (never evidence, never a pause); pod-scoped rows of the pod's instances (two engine
    containers on two ports) take the largest value. The engine series then go through the parser's own last step
    (:func:`watchdog.core.parsing.engine_series`: label sets without running dropped, the pod-scoped rows -- none
    of the engine labels -- applied to every engine series of the pod, waiting minus ignored, paused and awake
    folded, the series bound). Rows without both pod labels are ignored; pods that appear only in the time or
    ``up`` answers are left out (no signal: unknown). The time query may be answered a second time, after the
    others: engine series whose time it changes are :attr:`PodReading.moved`. ``names``: filled in with what each
    row identity of these answers names (:data:`Names`), for the next answer set's ``prior`` (the same series are
    named every cycle: their pod, key and instance host are then looked up, the pod IP check made anew)."""

    def __init__(self, profile: Profile, queries: Plan, ips: Mapping[PodKey, str] | None = None,
                 prior: Mapping[tuple[str | None, ...], Names] | None = None,
                 names: dict[tuple[str | None, ...], Names] | None = None) -> None:
        self.profile = profile
        self.prior: Mapping[tuple[str | None, ...], Names] = prior or {}  # the previous answer set's names
        self.names = {} if names is None else names  # what each row identity of these answers names (filled in)
        self.plan = queries
        self.ips = ips
        self.dropped = 0  # series (pod, engine, instance) whose instance is not their pod's IP
        self.engine_labels = queries.identity[2:]
        self.metrics = [None if s is None else s.metric for s in signal_slots(profile)]
        self.slots: dict[PodKey, dict[Labels, dict[str | None, list[float | None]]]] = {}  # pod, engine, instance
        self.times: dict[PodKey, dict[Labels, float]] | None = None  # per pod, its engine series' sample times
        self.after: dict[PodKey, dict[Labels, float]] | None = None  # the same, from the time query's second answer
        self.down: set[PodKey] = set()
        self._idents: dict[tuple[str | None, ...], _Named | None] = {}  # by row identity: _named

    def _own(self, namespace: str | None, name: str | None, instance: str | None) -> bool:
        """Whether a row of ``instance`` labelled with this pod is about it (module docstring: the identity)."""
        if not namespace or not name:
            return False
        if self.ips is None:
            return True
        ip = self.ips.get((namespace, name))
        return ip is not None and instance is not None and instance_host(instance) == ip

    def add(self, query: str, rows: Sequence[Series]) -> None:
        """Fold in the answer ``rows`` to ``query`` (one of the plan's; others are ignored), each row carrying the
        values of :meth:`Plan.labels_of` ``query``."""
        if query == self.plan.time:  # rows without both pod labels or a finite time are ignored
            times: dict[PodKey, dict[Labels, float]] = {}
            if self.times is None:
                self.times = times
            else:  # the time query's second answer: after the value queries
                self.after = times
            series_of = self._named
            for ident, value in rows:
                found = series_of(ident)
                if found is not None and math.isfinite(value):
                    pod, key = found.pod, found.key
                    engines = times.get(pod)
                    if engines is None:
                        engines = times[pod] = {}
                    engines[key] = max(value, engines.get(key, value))
        if query == self.plan.up:
            self.down.update((str(namespace), str(name)) for (namespace, name, instance), value in rows
                             if self._own(namespace, name, instance) and not value > 0)
        for index, slot in enumerate(self.plan.slots):  # nearly always one slot is this query
            if slot == query:
                self._add_slot(index, rows)

    def _add_slot(self, index: int, rows: Sequence[Series]) -> None:
        """One slot query's answer: each row's value added to its engine series' slot ``index``."""
        entries = self._idents
        entry_of = self._named
        new = self._row
        for ident, value in rows:  # the hot loop: one row per pod and engine series
            entry = entries.get(ident)
            if entry is None:
                if ident in entries:  # no pod labels, or not the pod's instance: ignored
                    continue
                entry = entry_of(ident)
                if entry is None:
                    continue
            row = entry.row
            if row is None:
                row = entry.row = new(entry, ident[-1])
            previous = row[index]
            row[index] = value if previous is None else previous + value

    def _row(self, entry: _Named, instance: str | None) -> list[float | None]:
        """The slots' values of the engine series of ``entry`` scraped from ``instance`` (new)."""
        engines = self.slots.setdefault(entry.pod, {})
        return engines.setdefault(entry.key, {}).setdefault(instance, [None] * len(self.plan.slots))

    def _named(self, ident: tuple[str | None, ...]) -> _Named | None:
        """The engine series a row of a slot or time query names (pod labels, engine labels, instance), or None
        without both pod labels or when the instance is not the pod's (counted in :attr:`dropped`, once per series);
        worked out once per answer set (and taken from :attr:`names` of the previous one when it named it too)."""
        try:
            return self._idents[ident]
        except KeyError:
            pass
        names = self.prior.get(ident)
        if names is None:
            names = self._names_of(ident)
        self.names[names[0]] = names
        _, pod, key, host = names
        entry = None
        if pod is not None and (self.ips is None or (host is not None and host == self.ips.get(pod))):
            entry = _Named(pod, key)
        else:
            self.dropped += pod is not None
        self._idents[names[0]] = entry  # its interned copy: the answer's own strings go with its rows
        return entry

    def _names_of(self, ident: tuple[str | None, ...]) -> Names:
        """What ``ident`` names, whichever pod IPs are watched: (``ident`` of interned strings, its pod (None
        without both pod labels), its engine series key, the host of its instance)."""
        interned = tuple(None if value is None else sys.intern(str(value)) for value in ident)
        namespace, name, *engine_values, instance = interned
        if not namespace or not name:
            return interned, None, (), None
        return interned, (namespace, name), self._engine(engine_values), instance and instance_host(instance)

    def _engine(self, values: Sequence[str | None]) -> Labels:
        """The engine series key of a row's engine label values (labels without a value left out)."""
        return tuple([(n, v) for n, v in zip(self.engine_labels, values, strict=True) if v])

    def pods(self) -> dict[PodKey, PodReading]:
        """Every pod with a slot row: its reading (without the engine series missing from their target's latest
        scrape; its pod-scoped rows, which have no time of their own, kept for every engine); and every pod whose
        target is down, with or without rows."""
        out = {}
        for pod, claimed in self.slots.items():
            conflict = _conflict(claimed)
            if conflict:
                out[pod] = PodReading(_NO_SERIES, conflict=conflict)
                continue
            every = {key: _largest(list(instances.values())) for key, instances in claimed.items()}
            times = (self.times or {}).get(pod, {})  # the engine series of their targets' latest scrapes
            engines = {k: v for k, v in every.items() if k in times} if times else every
            if not engines:  # nothing of a latest scrape: no series
                continue
            shared = every.get(())  # pod-scoped rows: no engine label, so no time of their own
            if shared is not None and shared[0] is None and () not in engines:  # (with running, an engine's)
                engines[()] = shared  # engine_series applies them to every engine of the pod
            slots = zip(*engines.values(), strict=True)  # per slot, its values over the pod's engine series
            found = [m for m, values in zip(self.metrics, slots, strict=True)
                     if m is not None and values.count(None) < len(values)]
            after = None if self.after is None else self.after.get(pod, {})
            moved = frozenset() if after is None else frozenset(k for k, t in times.items() if after.get(k) != t)
            ports = frozenset() if self.ips is None else frozenset(
                port for instance in {i for key in engines for i in claimed.get(key, {})} if (port := _port(instance)))
            out[pod] = PodReading(engine_series(engines, self.profile, found), pod in self.down, times, moved,
                                  ports=ports)
        for pod in self.down - out.keys():  # its target's scrapes fail (Prometheus marked its series stale): say so
            out[pod] = PodReading(_NO_SERIES, down=True)
        return out


def _port(instance: str | None) -> int | None:
    """The port of an ``instance`` label (``host:port``), or None."""
    port = (instance or "").rpartition(":")[2]
    return int(port) if port.isdigit() and 0 < int(port) < 65536 else None


def _conflict(claimed: Mapping[Labels, Mapping[str | None, object]]) -> str:
    """Why a pod's engine series are not one pod's: an engine series (not a pod-scoped one) of two instances."""
    for key, instances in claimed.items():
        if key and len(instances) > 1:
            names = ", ".join(sorted(str(i) for i in instances))
            labels = ",".join(f'{n}="{v}"' for n, v in key)
            return f"conflict: the engine series {{{labels}}} is claimed by {len(instances)} instances ({names})"
    return ""


def _largest(rows: list[list[float | None]]) -> list[float | None]:
    """Per slot, the largest known value of ``rows`` (one pod-scoped row per instance; an engine's only row)."""
    if len(rows) == 1:
        return rows[0]
    return [max((v for v in values if v is not None), default=None) for values in zip(*rows, strict=True)]


def reading_outcome(reading: PodReading | None) -> tuple[str, str]:
    """What the cycle does with one pod's reading: ``("ok", "")`` feed its engine series to their detectors (each
    at its own time: one whose time has not moved since it was last fed is not fed again, a sample seen twice
    would count as a busy sample without progress); ``("prometheus_unknown", why)`` unknown this cycle."""
    if reading is not None and reading.conflict:
        return "prometheus_unknown", reading.conflict
    if reading is not None and reading.down:
        return "prometheus_unknown", "Prometheus' newest up sample of its target is 0 (its scrapes fail)"
    if reading is None or not reading.parsed.series:
        return "prometheus_unknown", "no series of the profile in Prometheus within the staleness bound"
    if reading.t is None:
        return "prometheus_unknown", "Prometheus has no time for its newest running sample"
    return "ok", ""

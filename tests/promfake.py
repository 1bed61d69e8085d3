"""A loopback stand-in for Prometheus' instant-query API (``POST /api/v1/query``), for the unit tiers.

It evaluates the shapes of query the watchdog sends (watchdog/core/promql.py) from samples the test adds, as
Prometheus does: ``sum|max|min by|without (labels) (<expr>)``,
``<a> >= ignoring(labels) group_left <b>`` (the rows of ``a`` at least ``b``'s value of their group),
``last_over_time(name{l="v",l!="w",l=~"a|b"}[60s])`` (the newest
sample in ``(time - range, time]``, staleness markers skipped), the instant selector ``name{...}`` and
``timestamp(name{...})`` (the newest sample within the 5-minute lookback, absent when it is a staleness marker),
``<a> and <b>`` (the rows of ``a`` whose labels but the name are a row of ``b``), answered as a ``vector``;
anything else is a ``bad_data`` error. :meth:`FakePrometheus.feed` writes a staleness marker (a None value) for a
series its target no longer exposes, as a scrape does.
``fail`` makes every answer an HTTP status / body of the test's choosing; ``delay_s``
holds each answer back, ``slow`` (text -> seconds) each answer to a query containing that text. Every query
is recorded (``queries``: (query, time), ``headers``). The real
Prometheus tier is tests/prometheus/.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from prometheus_client.parser import text_string_to_metric_families

from watchdog.core.profiles import Profile
from watchdog.core.promql import Answers, PodReading, plan

_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?")
_AGGREGATE = re.compile(r"(sum|max|min) (by|without) \(([a-zA-Z0-9_, ]*)\) \((.*)\)")
_NEWEST_OF_GROUP = re.compile(r"(.*) >= ignoring\(([a-zA-Z0-9_, ]*)\) group_left (.*)")
_LATEST = re.compile(r"last_over_time\((.*)\[([0-9]+)s\]\)")
_TIMESTAMP = re.compile(r"timestamp\((.*)\)")
_LOOKBACK_S = 300.0
Item = tuple[frozenset[tuple[str, str]], list[tuple[float, float | None]]]  # None: a staleness marker
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)(=~|!~|!=|=)"((?:[^"\\]|\\.)*)"')


class FakePrometheus:
    def __init__(self) -> None:
        self.series: dict[frozenset[tuple[str, str]], list[tuple[float, float | None]]] = {}
        self.exposed: dict[frozenset[tuple[str, str]], set[frozenset[tuple[str, str]]]] = {}  # by target labels
        self.queries: list[tuple[str, float]] = []
        self.headers: list[dict[str, str]] = []
        self.fail: tuple[int, bytes] | None = None
        self.delay_s = 0.0
        self.slow: dict[str, float] = {}
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                query, at = form.get("query", [""])[0], float(form.get("time", ["0"])[0])
                with fake.lock:
                    fake.queries.append((query, at))
                    fake.headers.append(dict(self.headers))
                delay = max([fake.delay_s, *(s for text, s in fake.slow.items() if text in query)])
                if delay:
                    time.sleep(delay)
                status, body = fake.fail or fake.answer(query, at)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up (a timeout test)
                    pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 64  # the watchdog sends its queries at once
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # poll_interval: shutdown() waits up to one interval (0.5 s by default, in every test's teardown)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> FakePrometheus:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def feed(self, text: str, labels: Mapping[str, str], t: float) -> None:
        """Every sample of the exposition ``text``, as Prometheus stores it after scraping it at ``t`` with the
        target ``labels`` added."""
        with self.lock:
            now = stored(text, labels, t)
            target = frozenset(labels.items())
            for key in self.exposed.get(target, set()) - {key for key, _ in now}:
                self.series[key].append((t, None))  # gone from the target's /metrics: a staleness marker
            self.exposed[target] = {key for key, _ in now}
            for key, samples in now:
                self.series.setdefault(key, []).extend(samples)

    def add(self, name: str, labels: Mapping[str, str], t: float, value: float) -> None:
        """One sample of the series ``name{labels}`` at ``t`` (Unix seconds)."""
        key = frozenset({**labels, "__name__": name}.items())
        with self.lock:
            self.series.setdefault(key, []).append((t, value))

    def answer(self, query: str, at: float) -> tuple[int, bytes]:
        with self.lock:
            items = list(self.series.items())
        rows = evaluate(query, at, items)
        if rows is None:
            return 400, json.dumps({"status": "error", "errorType": "bad_data", "error": f"parse: {query}"}).encode()
        result = [{"metric": labels, "value": [at, _text(value)]} for labels, value in rows]
        return 200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def stored(text: str, labels: Mapping[str, str], t: float) -> list[Item]:
    """The series of the exposition ``text`` (prometheus_client's parser) as Prometheus stores them after one
    scrape at ``t`` that adds the target ``labels``."""
    return [(frozenset({**s.labels, **labels, "__name__": s.name}.items()), [(t, s.value)])
            for family in text_string_to_metric_families(text) for s in family.samples]


def evaluate(query: str, at: float, items: list[Item]) -> list[tuple[dict[str, str], float]] | None:
    """The rows of ``query`` at ``at`` over ``items`` ((labels incl. __name__, samples)), or None: not a query
    shape the watchdog sends."""
    if query == "vector(1)":  # the source's probe when no pod is due
        return [({}, 1.0)]
    if match := _AGGREGATE.fullmatch(query):
        inner = evaluate(match.group(4), at, items)
        if inner is None:
            return None
        names = [name.strip() for name in match.group(3).split(",") if name.strip()]
        groups: dict[tuple[tuple[str, str], ...], float] = {}
        for labels, value in inner:
            if match.group(2) == "by":
                key = tuple((n, labels[n]) for n in names if labels.get(n))
            else:
                key = tuple(sorted((n, v) for n, v in labels.items() if n not in names and n != "__name__"))
            old = groups.get(key)
            groups[key] = value if old is None else _combine(match.group(1), old, value)
        return [(dict(key), value) for key, value in groups.items()]
    if match := _NEWEST_OF_GROUP.fullmatch(query):  # a >= ignoring(l) group_left b: b unique per group
        left, right = evaluate(match.group(1), at, items), evaluate(match.group(3), at, items)
        if left is None or right is None:
            return None
        ignored = {name.strip() for name in match.group(2).split(",")} | {"__name__"}

        def group(labels: dict[str, str]) -> frozenset[tuple[str, str]]:
            return frozenset((k, v) for k, v in labels.items() if k not in ignored)

        by_group = {group(labels): value for labels, value in right}
        return [(labels, value) for labels, value in left
                if group(labels) in by_group and value >= by_group[group(labels)]]
    if (split := _top_level_and(query)) is not None:
        left, right = evaluate(split[0], at, items), evaluate(split[1], at, items)
        if left is None or right is None:
            return None
        def key(labels: dict[str, str]) -> frozenset[tuple[str, str]]:
            return frozenset((k, v) for k, v in labels.items() if k != "__name__")  # matched without the name

        keep = {key(labels) for labels, _ in right}
        return [(labels, value) for labels, value in left if key(labels) in keep]
    if match := _LATEST.fullmatch(query):
        return _select(match.group(1), at, float(match.group(2)), items, stamp=False, instant=False)
    if match := _TIMESTAMP.fullmatch(query):
        return _select(match.group(1), at, _LOOKBACK_S, items, stamp=True, instant=True)
    if _SELECTOR.fullmatch(query):
        return _select(query, at, _LOOKBACK_S, items, stamp=False, instant=True)
    return None


def pod_reading(profile: Profile, items: list[Item], at: float, pod: tuple[str, str] = ("n", "p"),
                ) -> PodReading | None:
    """What the Prometheus source reads for ``pod`` (namespace, name) at ``at`` from the stored ``items``: every
    query of the profile's plan evaluated here and fed to :class:`~watchdog.core.promql.Answers`, as
    ``fleet_reads`` feeds the answers of a real Prometheus; None when the pod has no reading."""
    queries = plan(profile, 60, "namespace", "pod")
    reading = Answers(profile, queries)
    for query in queries.queries():
        rows = evaluate(query, at, items)
        assert rows is not None, query
        reading.add(query, [(tuple(labels.get(n) for n in queries.labels_of(query)), value) for labels, value in rows])
    return reading.pods().get(pod)


def _top_level_and(query: str) -> tuple[str, str] | None:
    """``query`` split at an `` and `` outside brackets and quotes, or None."""
    depth, quoted, i = 0, False, 0
    while i < len(query):
        c = query[i]
        if quoted:
            i += 2 if c == "\\" else 1
            quoted = quoted and c != '"'
            continue
        if c == '"':
            quoted = True
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and query.startswith(" and ", i):
            return query[:i], query[i + 5:]
        i += 1
    return None


def _select(selector: str, at: float, seconds: float, items: list[Item], stamp: bool, instant: bool,
            ) -> list[tuple[dict[str, str], float]] | None:
    """The newest sample per series in ``(at - seconds, at]``: an instant selector honours a staleness marker there
    (the series is absent), a range (last_over_time) skips markers."""
    match = _SELECTOR.fullmatch(selector)
    if match is None:
        return None
    name, inner = match.group(1), match.group(2) or ""
    matchers = [(n, op, v.replace('\\"', '"').replace("\\\\", "\\")) for n, op, v in _MATCHER.findall(inner)]
    out = []
    for key, samples in items:
        labels = dict(key)
        if labels["__name__"] != name:
            continue
        if not all(_matches(labels.get(n, ""), op, v) for n, op, v in matchers):
            continue
        inside = [(t, v) for t, v in sorted(samples, key=lambda sample: sample[0]) if at - seconds < t <= at
                  and (instant or v is not None)]
        if inside and inside[-1][1] is not None:
            t, value = inside[-1]
            kept = labels if instant and not stamp else {k: v for k, v in labels.items() if k != "__name__"}
            out.append((kept, t if stamp else float(value)))  # type: ignore[arg-type]
    return out


def _matches(value: str, op: str, wanted: str) -> bool:
    """A label matcher: ``=``/``!=`` equality, ``=~``/``!~`` a fully anchored regular expression."""
    if op in ("=", "!="):
        return (value == wanted) == (op == "=")
    return (re.fullmatch(wanted, value) is not None) == (op == "=~")


def _combine(op: str, old: float, new: float) -> float:
    if op == "sum":
        return old + new
    if op == "max":
        return new if old != old or new > old else old
    return new if old != old or new < old else old


def _text(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))

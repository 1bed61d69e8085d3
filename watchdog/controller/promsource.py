"""``source: prometheus``: the engine signals of a cycle's pods read from Prometheus instead of their ``/metrics``.

Per cycle, :meth:`PrometheusSource.read_pods` reads only what is watched: the cycle's pods grouped per profile and
namespace, a namespace's pod names in chunks (:func:`watchdog.core.promql.scopes`), and per such scope one instant
query per signal slot of the profile plus the pods' sample times and ``up``, each carrying the scope's matchers
(``namespace="ns",pod=~"a|b"``) and the configured ``prometheusExtraMatchers``. An answer thus grows with the
pods of one scope, never with what else Prometheus holds, and a failed one (unreachable, HTTP error, timeout, body
over ``prometheusMaxBytes``, ``status: error``, ``warnings``) makes only its scope's pods unknown that cycle: one
tenant's huge or slow series blind that tenant's namespace alone. The queries run 4 in flight under one deadline
for the cycle's reading (:class:`_Schedule`): each scope's in turn -- its time query, its value queries, its time
query again -- on its own, so a slow or failing scope delays only itself, and a free slot goes to the tenant with
the fewest queries in flight, so a tenant whose namespaces' queries hang holds at most its share of the slots. An
engine series whose time differs between its scope's two time queries (Prometheus appended a scrape of its target
while the values were being read, so the values may be newer than the time) is held that cycle, never fed values
under an older time (:mod:`watchdog.core.promql` writes the queries and groups the answers per pod, keeping only the
rows whose ``instance`` is the pod's IP from the API server, and calling two instances claiming one engine series a
conflict). :meth:`PrometheusSource.read_pod` runs one pod's queries (``check --prometheus``).

The confirmation right before a removal (:meth:`PrometheusSource.confirm`) never reads Prometheus: a series can
carry any pod's labels (``honor_labels``, Pushgateway, federation, remote write), so the removal is confirmed by
the pod itself, a direct read of its own ``/metrics`` at its IP from the API server (``confirm_with``: the bounded
scrape of ``source: scrape``). When that read fails (no network path to the pods' metrics port, a NetworkPolicy),
nothing is removed.

As a :class:`~watchdog.controller.ports.Source`, Prometheus' sample times are moved onto the cycle's monotonic
clock (``offset``: wall clock minus monotonic clock, fixed at start; their differences exactly as Prometheus stamped
them), and a sample already fed is not fed again (each reading's ``mark``: the newest sample time fed).
"""

from __future__ import annotations

import logging
import time
from bisect import insort
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from watchdog.adapters.logs import facts
from watchdog.adapters.promdecode import PrometheusError
from watchdog.controller.reading import Reading
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import ParseResult
from watchdog.core.profiles import Profile
from watchdog.core.promql import Answers, Names, Plan, PodKey, PodReading, Scope, Series, plan, reading_outcome, scopes

if TYPE_CHECKING:  # types only: `check --prometheus` must not import the Kubernetes client
    from watchdog.controller.ports import Clock, Querier
    from watchdog.controller.state import PodRecord

log = logging.getLogger(__name__)
_WHAT = "reading it from Prometheus"


class PrometheusSource:
    """Reads the signals of Prometheus pods through ``client`` (a :class:`Querier`); as a Source, of the targets'
    ``profiles`` (target name -> profile), queried at ``wall_clock`` (Unix s). ``instance_check``: rows whose
    ``instance`` host is not the pod's IP are dropped; ``extra``: matchers added to every query;
    ``confirm_with``: the direct read of one pod that confirms a removal (None: nothing is ever confirmed)."""

    def __init__(self, client: Querier, staleness_s: float, namespace_label: str, pod_label: str,
                 timeout_s: float | None = None, *, profiles: Mapping[str, Profile] | None = None,
                 wall_clock: Clock = time.time, offset: float = 0.0, where: str = "prometheus",
                 instance_check: bool = True, extra: Sequence[str] = (),
                 confirm_with: Callable[[WatchedPod], Reading] | None = None) -> None:
        self.client = client
        self.where = where  # "prometheus (URL)": what it reads, for people (/readyz, the log)
        self.timeout_s = timeout_s  # one deadline for a reading's batches of queries (None: one per batch)
        self.staleness_s = staleness_s
        self.namespace_label = namespace_label
        self.pod_label = pod_label
        self.profiles, self.wall_clock, self.offset = profiles or {}, wall_clock, offset
        self.instance_check, self.extra, self.confirm_with = instance_check, tuple(extra), confirm_with
        self._ports: dict[str, tuple[int, ...]] = {}  # pod UID -> the ports a removal is confirmed on (last read)
        self._names: dict[tuple[str | None, ...], Names] = {}  # what the last reading's row identities named (Answers)

    def read_pod(self, profile: Profile, namespace: str, name: str, at: float) -> PodReading | str | None:
        """One pod's fresh reading (None: no series), or why the queries failed (one line); its instance is not
        checked (no pod IP here)."""
        job = self._job(profile, Scope(namespace, (name,)), None)
        error = self._read([job], at, bracket=False).errors[0]
        return error or job.pods().get((namespace, name))

    def _job(self, profile: Profile, scope: Scope, ips: Mapping[PodKey, str] | None,
             names: dict[tuple[str | None, ...], Names] | None = None) -> Answers:
        """The answers of one profile and scope to come; ``names``: this reading's row identities (the previous
        reading's are looked up first: the same series are named every cycle)."""
        matchers = [*scope.matchers(self.namespace_label, self.pod_label), *self.extra]
        queries = plan(profile, self.staleness_s, self.namespace_label, self.pod_label, matchers)
        return Answers(profile, queries, ips, self._names if names is not None else None, names)

    def _read(self, jobs: list[Answers], at: float, tenants: Sequence[str] | None = None,
              bracket: bool = True) -> _Schedule:
        """Run the queries of ``jobs`` (one per profile and scope; ``tenants``: each one's tenant), folding each
        answer into its job (:class:`_Schedule` says in what order); per job, why it failed (one line) or ``""``, in
        the returned schedule's ``errors``. ``bracket``: a job's time query before and after its others (module
        docstring), else all at once. One query may take at most half of the reading's timeout: a hanging one frees
        its slot for the others' while there is time left."""
        schedule = _Schedule(jobs, tenants or [""] * len(jobs), bracket)
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        query_s = None if self.timeout_s is None else self.timeout_s / 2
        try:
            for index, rows in self.client.query_each(schedule, at, deadline, query_s):  # folded in, dropped
                schedule.answered(index, rows)
                del rows
        except Exception as exc:  # a bug reading one answer must not stop the cycle of every other pod: unknown
            log.exception("reading Prometheus' answers failed unexpectedly")
            why = f"unexpected {type(exc).__name__} reading Prometheus' answers: {exc}"[:400]
            schedule.errors = [e or why for e in schedule.errors]
        return schedule

    # -- the Source ---------------------------------------------------------------------------------------------
    def start(self, pods: Sequence[tuple[WatchedPod, PodRecord]]) -> Callable[[], Mapping[str, Reading]]:
        """The readings are made when asked for, in the caller's thread (while the scrapes run on their loop)."""
        return lambda: self.read_pods(pods, self.wall_clock())

    def read_pods(self, pods: Sequence[tuple[WatchedPod, PodRecord]], at: float) -> dict[str, Reading]:
        """Per pod UID, this cycle's reading of ``pods``, queried at ``at`` (the wall clock)."""
        if not pods:
            return {}
        ips: dict[Profile, dict[PodKey, str]] = {}
        for target, _ in pods:
            ips.setdefault(self.profiles[target.target_name], {})[(target.namespace, target.name)] = target.ip
        names: dict[tuple[str | None, ...], Names] = {}
        scoped = [(scope, self._job(profile, scope, own if self.instance_check else None, names))
                  for profile, own in sorted(ips.items(), key=lambda item: item[0].name) for scope in scopes(own)]
        jobs = [job for _, job in scoped]
        tenants = {target.namespace: target.tenant for target, _ in pods}
        errors = self._read(jobs, at, [tenants[scope.namespace] for scope, _ in scoped]).errors
        dropped = sum(job.dropped for job in jobs)
        del jobs
        self._names = names  # bounded: what this reading's answers named
        readings: dict[tuple[Profile, PodKey], PodReading | str | None] = {}
        scoped.reverse()
        for error in errors:  # each scope's answers let go once its pods are read (memory: one scope's at a time)
            scope, job = scoped.pop()
            if error:
                log.warning("Prometheus query for namespace %s failed: %s: the engines of its %d pods read in it are "
                            "unknown this cycle", scope.namespace, error, len(scope.pods),
                            extra=facts(namespace=scope.namespace, result="prometheus_error", reason=error))
            found = {} if error else job.pods()
            for name in scope.pods:
                readings[(job.profile, (scope.namespace, name))] = error or found.get((scope.namespace, name))
        if dropped:
            log.debug("Prometheus: %d series labelled with a watched pod were not scraped from its IP (their "
                      "instance): ignored", dropped)
        out = {}
        self._ports = {}
        for target, record in pods:
            reading = readings.get((self.profiles[target.target_name], (target.namespace, target.name)))
            if isinstance(reading, PodReading):  # its metrics port, and any other port it declares that was scraped
                self._ports[target.uid] = tuple(sorted({target.port} | (reading.ports & set(target.ports))))
            out[target.uid] = self._reading(reading, record)
        return out

    def _reading(self, reading: PodReading | str | None, record: PodRecord) -> Reading:
        """One pod's reading of this cycle (``str``: its scope's query failed)."""
        offset = self.offset
        last = None if record.mark is None else record.mark - offset
        if isinstance(reading, str):
            return Reading("prometheus_error", detail=reading, what=_WHAT, t=last)
        outcome, why = reading_outcome(reading)
        if outcome != "ok" or reading is None or reading.t is None:
            return Reading(outcome, detail=why, what=_WHAT, t=last)
        newest = reading.t if record.mark is None else max(reading.t, record.mark)
        stamps = {labels: None if labels in reading.moved else t - offset for labels, t in reading.times.items()}
        return Reading("ok", reading.parsed, t=newest - offset, stamps=stamps, mark=newest)

    def confirm(self, pod: WatchedPod) -> Reading:
        """The confirmation before a removal: the pod's own ``/metrics`` read directly at its IP (module
        docstring), never Prometheus -- on its metrics port, and on each other port it declares where Prometheus
        scraped its engines from its IP (two containers on two ports) -- their engine series together; a failed
        read is unknown (nothing is removed)."""
        if self.confirm_with is None:
            return Reading("prometheus_unknown", detail="no direct read of the pod to confirm with", what=_WHAT)
        reads = [self.confirm_with(replace(pod, port=port)) for port in self._ports.get(pod.uid, (pod.port,))]
        failed = next((r for r in reads if r.parsed is None), None)
        if failed is not None or len(reads) == 1:
            return failed or reads[0]
        parsed = [r.parsed for r in reads if r.parsed is not None]
        series = tuple(s for p in parsed for s in p.series)
        found = frozenset().union(*(p.found_families for p in parsed))
        return Reading("ok", ParseResult(series, sum(p.skipped_lines for p in parsed), found))

    def probe(self) -> tuple[str, str] | None:
        """One constant query (``vector(1)``) when no pod was due: a Prometheus that cannot be queried at all
        (a wrong prometheusUrl, credentials, TLS) shows before any namespace is opted in."""
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        for _, rows in self.client.query_each([("vector(1)", ())], self.wall_clock(), deadline):
            if isinstance(rows, PrometheusError):
                return "prometheus_error", f"{_WHAT}: {rows}"
        return "ok", ""

    def close(self) -> None:
        """Nothing to release: every query opens and closes its own connection."""


class _Schedule:
    """The order of one reading's queries, as an iterator pulled once per free slot (``PrometheusClient.
    query_each``). Each job goes through its stages in turn -- its time query, its value queries, its time query
    again -- a stage once every query of the one before was answered, independently of the other jobs: a slow or
    failing namespace delays only its own reading, never another's (one failed query ends its job: the rest of
    its queries are not sent). A free slot goes to a ready query of the tenant with the fewest queries in flight,
    then to the job first in ``jobs``. ``None``: nothing to send until an answer arrives. Work per pull: one pass
    over the tenants with a ready job."""

    def __init__(self, jobs: Sequence[Answers], tenants: Sequence[str], bracket: bool) -> None:
        self.jobs, self.tenants = jobs, tenants
        self.errors = [""] * len(jobs)
        self._stages = [deque(deque(stage) for stage in _stages(job.plan, bracket)) for job in jobs]
        self._flying = [0] * len(jobs)
        self._tenant_flying: Counter[str] = Counter()
        self._ready: dict[str, list[int]] = {}  # tenant -> its jobs with a query to send, in order
        for i, tenant in enumerate(tenants):
            self._ready.setdefault(tenant, []).append(i)
        self._sent: list[tuple[int, str]] = []  # by query_each's index: (job, query)

    def __iter__(self) -> Iterator[tuple[str, tuple[str, ...]] | None]:
        while True:
            tenant = min((t for t, ready in self._ready.items() if ready), default=None,
                         key=lambda t: (self._tenant_flying[t], self._ready[t][0]))
            if tenant is None:
                if not self._tenant_flying.total():
                    return
                yield None
                continue
            i = self._ready[tenant][0]
            query = self._stages[i][0].popleft()
            if not self._stages[i][0]:  # its stage all sent: ready again once it is answered
                self._ready[tenant].pop(0)
            self._flying[i] += 1
            self._tenant_flying[tenant] += 1
            self._sent.append((i, query))
            yield query, self.jobs[i].plan.labels_of(query)

    def answered(self, index: int, rows: list[Series] | PrometheusError) -> None:
        """Fold the answer to the ``index``-th query sent into its job (or end the job with its error)."""
        i, query = self._sent[index]
        tenant = self.tenants[i]
        self._flying[i] -= 1
        self._tenant_flying[tenant] -= 1
        if isinstance(rows, PrometheusError):
            if not self.errors[i] and i in self._ready[tenant]:
                self._ready[tenant].remove(i)  # the rest of its queries are not sent
            self.errors[i] = self.errors[i] or str(rows)
            return
        if self.errors[i]:
            return
        self.jobs[i].add(query, rows)
        stages = self._stages[i]
        if not stages[0] and not self._flying[i]:  # its stage answered in full: the next one, if any
            stages.popleft()
            if stages:
                insort(self._ready[tenant], i)


def _stages(plan: Plan, bracket: bool) -> list[list[str]]:
    """A job's queries in the order they are sent: with ``bracket`` the time query, the others, the time query."""
    if not bracket:
        return [plan.queries()]
    return [[plan.time], [q for q in plan.queries() if q != plan.time], [plan.time]]

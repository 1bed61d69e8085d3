"""``source: prometheus`` through the real cycle: the Kubernetes API emulator (kmock, real HTTP; not a cluster)
for discovery and deletion, and a loopback fake of Prometheus' query API (tests/promfake.py) holding the
samples, stamped with Prometheus' time. The wall clock is Prometheus' clock here; the fake monotonic clock
moves with it (15 s a cycle)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import builders
import pytest
from cycle_kit import NS, Rig, make_config, remediated, sample, states

from tests.promfake import FakePrometheus
from watchdog.adapters.prometheus import PrometheusClient
from watchdog.adapters.scrape_errors import ScrapeError
from watchdog.config.loader import ConfigError, load_config
from watchdog.controller import promsource
from watchdog.controller.cycle import CycleReport
from watchdog.controller.promsource import PrometheusSource
from watchdog.controller.reading import Reading
from watchdog.controller.state import PodRecord
from watchdog.core.model import GATE_CONDITION, NAMESPACE_LABEL, WatchedPod
from watchdog.core.parsing import parse_exposition
from watchdog.core.policy import Decision
from watchdog.core.profiles import get_profile
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config

BASE = 1_700_000_000.0
PROM = {"source": "prometheus", "prometheusTimeoutSeconds": 0.8}


class Direct:
    """The pods' own ``/metrics`` for the direct confirmation read: per (IP, port), its engines' newest exposition
    (what :meth:`PromRig.engine` last had Prometheus scrape); nothing listening elsewhere."""

    def __init__(self) -> None:
        self.bodies: dict[tuple[str, int], dict[str, str]] = {}

    def fetch(self, url: str) -> bytes:
        host, _, port = url.split("/")[2].rpartition(":")
        engines = self.bodies.get((host, int(port)))
        if engines is None:
            raise ScrapeError("refused", "connection refused")
        return "".join(engines.values()).encode()


class PromRig(Rig):
    def __init__(self, api: EmulatorServer, tmp_path: Path, prom: FakePrometheus, **config: Any) -> None:
        self.direct = Direct()
        super().__init__(api, make_config(tmp_path, prometheusUrl=prom.url, **{**PROM, **config}),
                         scraper=self.direct, wall_clock=lambda: BASE + self.now)
        self.prom = prom
        self.pods: dict[str, dict[str, Any]] = {}
        self.ips: dict[str, str] = {}

    def deploy(self, name: str, ip: str, namespace: str = NS) -> str:
        self.pods[name] = seed_deployment(self.api, namespace, name, ip, 8000)["pod"]
        self.ips[name] = ip
        return str(self.pods[name]["metadata"]["name"])

    def engine(self, pod: str, *, running: float, tokens: float, engine: str = "0", at: float | None = None,
               **extra: str) -> None:
        """One Prometheus scrape of one vLLM engine of ``pod`` (scraped from its IP, port 8000 unless ``extra``
        names another instance), 5 s before the next cycle's query; the pod's own /metrics shows the same."""
        t = BASE + self.now + 15.0 - 5.0 if at is None else at
        meta = self.pods[pod]["metadata"]
        labels = {"namespace": meta["namespace"], "pod": meta["name"], "engine": engine, "model_name": "m",
                  "instance": f"{self.ips[pod]}:8000", "job": "vllm", **extra}
        self.prom.add("vllm:num_requests_running", labels, t, running)
        self.prom.add("vllm:generation_tokens_total", labels, t, tokens)
        host, _, port = labels["instance"].rpartition(":")
        own = f'engine="{engine}",model_name="m"'
        self.direct.bodies.setdefault((host, int(port)), {})[engine] = (
            f"vllm:num_requests_running{{{own}}} {running}\nvllm:generation_tokens_total{{{own}}} {tokens}\n")

    def up(self, pod: str, value: float) -> None:
        meta = self.pods[pod]["metadata"]
        self.prom.add("up", {"namespace": meta["namespace"], "pod": meta["name"], "job": "vllm",
                             "instance": f"{self.ips[pod]}:8000"}, BASE + self.now + 10.0, value)


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    with FakePrometheus() as fake:
        yield fake


@pytest.fixture
def prig(emulator: EmulatorServer, tmp_path: Path, prom: FakePrometheus) -> Iterator[PromRig]:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    r = PromRig(emulator, tmp_path, prom)
    yield r
    r.close()


def by_pod(report: CycleReport) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ref, key, verdict in report.verdicts:
        out.setdefault(ref.split("/", 1)[1].split("-", 1)[0], []).append(f"{key}:{verdict.state}")
    return out


def test_a_wedge_is_detected_from_prometheus_and_the_pod_deleted_with_constant_queries(prig: PromRig) -> None:
    prig.deploy("wedged", "127.0.0.2")
    prig.deploy("busy", "127.0.0.3")
    reports = []
    for i in range(3):
        prig.engine("wedged", running=4, tokens=500)
        prig.engine("busy", running=2, tokens=100 * (i + 1))
        prig.up("wedged", 1)
        prig.up("busy", 1)
        before = len(prig.prom.queries)
        reports.append(prig.cycle())
        # one namespace: one query per vllm signal slot (13) + up, and the time query before and after them, each
        # scoped to the namespace's watched pods; time = the wall clock
        cycle = prig.prom.queries[before:]
        assert len(cycle) == 16 and {at for _, at in cycle} == {BASE + prig.now}
        assert cycle[0][0] == cycle[-1][0] and "(timestamp(vllm:num_requests_running{" in cycle[0][0]
        names = sorted(p["metadata"]["name"] for p in prig.pods.values())
        assert all(f'namespace="inference",pod=~"{names[0]}|{names[1]}"' in q for q, _ in cycle)
    assert [states(r) for r in reports] == [
        {"wedged": "suspect", "busy": "suspect"}, {"wedged": "suspect", "busy": "progressing"},
        {"wedged": "stalled", "busy": "progressing"}]
    # the detector ran on Prometheus' timestamps (moved onto the monotonic clock: 15 s apart, 5 s before now)
    assert [v.t for ref, _, v in reports[2].verdicts if "wedged" in ref] == [prig.now - 5.0]
    assert remediated(reports[2]) == [(f"{NS}/{prig.pods['wedged']['metadata']['name']}", "deleted")]
    assert not prig.exists(prig.pods["wedged"]) and prig.exists(prig.pods["busy"])
    # the confirmation read the pod itself (counted as a scrape), not Prometheus again
    assert reports[2].scrapes == {"ok": 2} and len(prig.prom.queries) == 3 * 16
    assert sample(prig, "vllm_watchdog_scrapes_total", {"outcome": "ok"}) == 7.0


def test_a_sample_already_fed_is_not_fed_again(prig: PromRig) -> None:
    prig.deploy("wedged", "127.0.0.2")
    prig.engine("wedged", running=4, tokens=500)  # one Prometheus scrape, then Prometheus scrapes nothing new
    first = prig.cycle()
    reports = [prig.cycle() for _ in range(2)]
    # the same sample three times would be 3 busy samples over 30 s: stalled. Fed once, it stays suspect.
    assert [states(r) for r in [first, *reports]] == [{"wedged": "suspect"}] * 3
    assert [v.busy_samples for _, _, v in reports[-1].verdicts] == [1]  # one sample, however often it was read
    assert reports[-1].remediations == [] and prig.exists(prig.pods["wedged"])


def test_engines_of_one_pod_on_two_scrape_targets_are_each_judged_at_their_own_scrapes_time(prig: PromRig) -> None:
    # Two containers on two ports, two targets scraped 4 s apart: engine 0 (target a) wedged, engine 1 (b) busy.
    name = prig.deploy("pair", "127.0.0.2")
    reports = []
    for i in range(3):
        at = BASE + prig.now + 15.0 - 9.0
        prig.engine("pair", running=4, tokens=500, engine="0", at=at, instance="127.0.0.2:8000")
        prig.engine("pair", running=2, tokens=100 * (i + 1), engine="1", at=at + 4.0, instance="127.0.0.2:8001")
        prig.up("pair", 1)
        reports.append(prig.cycle())
    verdicts = {key: (v.state, v.t) for _, key, v in reports[1].verdicts}
    assert verdicts == {'engine="0",model_name="m"': ("suspect", prig.now - 15.0 - 9.0),
                        'engine="1",model_name="m"': ("progressing", prig.now - 15.0 - 5.0)}
    assert [(key, v.state, v.stalled_for_s) for _, key, v in reports[2].verdicts] == [
        ('engine="0",model_name="m"', "stalled", 30.0), ('engine="1",model_name="m"', "progressing", 0.0)]
    assert remediated(reports[2]) == [(f"{NS}/{name}", "deleted")]


def test_a_held_stalled_verdict_is_never_acted_on_only_a_fresh_one(prig: PromRig,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Engine 1 (target b) stalls, its deletion is deferred once (a rail); then target b stops delivering without
    # staleness markers while target a goes on: Prometheus keeps answering b's last sample, which is held (not fed
    # again) and its verdict stands on old data; a confirmation would only read it again. Nothing acts on it until
    # b delivers a newer sample (still frozen): then the pod is deleted.
    name = prig.deploy("pair", "127.0.0.2")
    real, deferred = prig.wd.policy.decide, []

    def decide(**kw: Any) -> Decision:
        if not deferred:
            deferred.append(prig.now)
            return Decision("defer", "budget", "the test's one deferral")
        return real(**kw)

    monkeypatch.setattr(prig.wd.policy, "decide", decide)
    seen = []
    for i in range(6):
        at = BASE + prig.now + 15.0 - 9.0
        prig.engine("pair", running=2, tokens=100 * (i + 1), engine="0", at=at, instance="127.0.0.2:8001")
        if i < 3 or i == 5:  # target b delivers nothing new in cycles 3 and 4
            prig.engine("pair", running=4, tokens=500, engine="1", at=at + 4.0, instance="127.0.0.2:8000")
        prig.up("pair", 1)
        report = prig.cycle()
        seen.append((by_pod(report)["pair"], remediated(report)))
    stalled = ['engine="0",model_name="m":progressing', 'engine="1",model_name="m":stalled']
    assert seen[2:] == [(stalled, [(f"{NS}/{name}", "deferred")]), (stalled, []), (stalled, []),
                        (stalled, [(f"{NS}/{name}", "deleted")])]
    assert len(deferred) == 1


class RacyPrometheus(FakePrometheus):
    """Appends the ``pending`` samples right after it answers a time query, and answers no other query before
    that: a scrape of the pod landing while the watchdog reads the values of a cycle."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[tuple[str, dict[str, str], float, float]] = []
        self.timed = threading.Event()

    def answer(self, query: str, at: float) -> tuple[int, bytes]:
        if "timestamp(" not in query:
            self.timed.wait(2)
            return super().answer(query, at)
        out = super().answer(query, at)
        for pending in self.pending:
            self.add(*pending)
        self.pending = []
        self.timed.set()
        return out


def test_values_newer_than_their_time_are_not_fed_under_that_time(emulator: EmulatorServer, tmp_path: Path) -> None:
    # Prometheus scrapes every 7.5 s, the watchdog reads every 15 s. The last progress is the scrape at 70 s, which
    # lands after the cycle's time query (it saw the scrape at 62.5 s) and before its value queries: fed under
    # 62.5 s, that progress would start the stall clock 7.5 s early and the pod would be deleted on 45 s of proven
    # no-progress with a 50 s window. The time query runs again after the values: it moved, the engine is held.
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    with RacyPrometheus() as racy:
        rig = PromRig(emulator, tmp_path, racy, windowSeconds=50)
        try:
            name = rig.deploy("p", "127.0.0.2")
            labels = {"namespace": NS, "pod": name, "engine": "0", "model_name": "m", "instance": "127.0.0.2:8000",
                      "job": "j"}
            own = 'engine="0",model_name="m"'
            rig.direct.bodies[("127.0.0.2", 8000)] = {"0": f"vllm:num_requests_running{{{own}}} 4\n"
                                                          f"vllm:generation_tokens_total{{{own}}} 400\n"}
            deleted_at, held = None, []
            for i in range(12):
                racy.timed.clear()
                for at, tokens in ((BASE + rig.now + 2.5, 100.0 * min(max(i - 1, 0), 4)),
                                   (BASE + rig.now + 10.0, 100.0 * min(i, 4))):  # the newest, 5 s before the query
                    scrape = [("vllm:num_requests_running", labels, at, 4.0),
                              ("vllm:generation_tokens_total", labels, at, tokens),
                              ("up", {"namespace": NS, "pod": name, "job": "j", "instance": "127.0.0.2:8000"}, at,
                               1.0)]
                    if at == BASE + 70.0:
                        racy.pending = scrape
                    else:
                        for one in scrape:
                            racy.add(*one)
                report = rig.cycle()
                held += [v.t for _, _, v in report.verdicts] if i == 4 else []
                if remediated(report) and deleted_at is None:
                    deleted_at = BASE + rig.now - 5.0
            assert held == [55.0]  # cycle 4: the verdict of the scrape at 55 s stands, nothing fed
            assert deleted_at is not None and deleted_at - (BASE + 70.0) >= 50.0 - 0.5, deleted_at - BASE
        finally:
            rig.close()


def test_the_confirmation_before_a_removal_reads_the_pod_itself_never_prometheus(prom: FakePrometheus) -> None:
    client = PrometheusClient(builders.prometheus_limits(prom.url, timeout_s=2.0))
    target = WatchedPod("uid-1", NS, "p", "127.0.0.2", 8000, "/metrics", "vllm", "vllm", "enforce", 0, None)
    labels = {"namespace": NS, "pod": "p", "engine": "0", "model_name": "m", "instance": "127.0.0.2:8000"}
    prom.add("vllm:num_requests_running", labels, BASE - 5, 4)
    prom.add("vllm:generation_tokens_total", labels, BASE - 5, 500)
    direct = Reading("ok")
    read = PrometheusSource(client, 60, "namespace", "pod", confirm_with=lambda pod: direct).confirm(target)
    assert read is direct
    alone = PrometheusSource(client, 60, "namespace", "pod").confirm(target)  # nothing to confirm with: unknown
    assert (alone.outcome, alone.parsed) == ("prometheus_unknown", None)
    assert prom.queries == []


def test_a_stale_series_is_unknown_and_unknown_is_never_evidence(prig: PromRig) -> None:
    prig.deploy("wedged", "127.0.0.2")
    for _ in range(2):
        prig.engine("wedged", running=4, tokens=500)
        prig.cycle()
    # Prometheus stops getting samples: 5 cycles later (75 s > 60 s staleness) nothing is left in the range
    reports = [prig.cycle() for _ in range(5)]
    assert reports[0].scrapes == {"ok": 1}  # the newest sample is still in range but was already fed
    assert reports[-1].scrapes == {"prometheus_unknown": 1}
    assert states(reports[-1]) == {"wedged": "unknown"}
    assert all(r.remediations == [] for r in reports) and prig.exists(prig.pods["wedged"])
    assert sample(prig, "vllm_watchdog_scrapes_total", {"outcome": "prometheus_unknown"}) == 2.0


def test_prometheus_down_makes_every_pod_unknown_and_deletes_nothing(prig: PromRig) -> None:
    prig.deploy("wedged", "127.0.0.2")
    prig.deploy("other", "127.0.0.3")
    prig.engine("wedged", running=4, tokens=500)
    prig.engine("other", running=4, tokens=500)
    prig.cycle()
    prig.prom.fail = (503, b"Service Unavailable")
    reports = []
    for _ in range(4):
        prig.engine("wedged", running=4, tokens=500)
        reports.append(prig.cycle())
    assert all(r.scrapes == {"prometheus_error": 2} for r in reports)
    assert all(set(states(r).values()) == {"unknown"} for r in reports)
    assert all(r.remediations == [] for r in reports) and prig.exists(prig.pods["wedged"])
    assert "HTTP 503" in prig.wd.pods[prig.pods["wedged"]["metadata"]["uid"]].scrape_detail


def test_an_unexpected_failure_reading_the_answers_makes_the_pods_unknown_not_the_cycle_fail(
        prig: PromRig, monkeypatch: pytest.MonkeyPatch) -> None:
    prig.deploy("wedged", "127.0.0.2")
    prig.engine("wedged", running=4, tokens=500)

    def broken(*_: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(promsource.Answers, "add", broken)
    report = prig.cycle()  # no exception: the cycle goes on for every other pod
    assert report.scrapes == {"prometheus_error": 1} and report.engines == {"unknown": 1}
    assert "unexpected KeyError" in prig.wd.pods[prig.pods["wedged"]["metadata"]["uid"]].scrape_detail


def test_up_zero_is_unknown_even_with_fresh_looking_series(prig: PromRig) -> None:
    prig.deploy("wedged", "127.0.0.2")
    reports = []
    for _ in range(4):
        prig.engine("wedged", running=4, tokens=500)
        prig.up("wedged", 0)
        reports.append(prig.cycle())
    assert all(r.scrapes == {"prometheus_unknown": 1} for r in reports)
    assert all(r.remediations == [] for r in reports) and prig.exists(prig.pods["wedged"])


def test_a_counter_reset_is_progress_and_data_parallel_engines_stay_apart(prig: PromRig) -> None:
    prig.deploy("dp", "127.0.0.2")
    seen = []
    for tokens in (900, 900, 10, 10):  # 900 -> 10: the engine restarted (reset), then flat again
        prig.engine("dp", running=3, tokens=tokens, engine="0")
        prig.engine("dp", running=0, tokens=7, engine="1")
        seen.append(by_pod(prig.cycle())["dp"])
    assert seen == [
        ['engine="0",model_name="m":suspect', 'engine="1",model_name="m":idle'],
        ['engine="0",model_name="m":suspect', 'engine="1",model_name="m":idle'],
        ['engine="0",model_name="m":progressing', 'engine="1",model_name="m":idle'],
        ['engine="0",model_name="m":suspect', 'engine="1",model_name="m":idle']]
    assert prig.exists(prig.pods["dp"])


@pytest.mark.parametrize("pause", ["vllm:rl_weight_update_operations_in_flight",
                                   "vllm:sleep_mode_operations_in_flight"])
def test_a_pod_scoped_pause_pauses_every_engine_of_the_pod_and_nothing_is_deleted(prig: PromRig, pause: str) -> None:
    # vLLM prints these gauges with the operation label only (no engine, no model_name): one row of the pod, no
    # engine's own. Both engines busy and frozen far longer than the window while it reads 1: paused, never stalled.
    prig.deploy("updating", "127.0.0.2")
    seen = []
    for _ in range(4):
        for engine in ("0", "1"):
            prig.engine("updating", running=4, tokens=500, engine=engine)
        prig.prom.add(pause, {"namespace": NS, "pod": prig.pods["updating"]["metadata"]["name"], "job": "vllm",
                              "instance": f"{prig.ips['updating']}:8000", "operation": "update"},
                      BASE + prig.now + 10.0, 1.0)
        report = prig.cycle()
        seen.append((by_pod(report)["updating"], report.remediations))
    assert seen == [(['engine="0",model_name="m":paused', 'engine="1",model_name="m":paused'], [])] * 4
    assert prig.exists(prig.pods["updating"])


def test_a_target_may_choose_its_source(emulator: EmulatorServer, tmp_path: Path, prom: FakePrometheus) -> None:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    targets = [{"name": "vllm", "podSelector": "app.kubernetes.io/name=vllm", "source": "prometheus"}]
    rig = PromRig(emulator, tmp_path, prom, source="scrape", targets=targets)
    try:
        rig.deploy("a", "127.0.0.2")
        rig.engine("a", running=1, tokens=5)
        assert rig.cycle().scrapes == {"ok": 1} and len(prom.queries) == 16
    finally:
        rig.close()


@pytest.mark.parametrize(("settings", "problem"), [
    ({"source": "prometheus"}, "source prometheus (targets llmkube-vllm, vllm) needs prometheusUrl"),
    ({"source": "prometheus", "prometheusUrl": "ftp://x"}, "must be http(s)://"),
    ({"prometheusUrl": "http://u:p@prom:9090"}, "must not carry credentials"),
    ({"prometheusPodLabel": "pod-name"}, "'pod-name' must be a Prometheus label name"),
    ({"prometheusUsernameFile": "/u"}, "basic auth needs both a username file and a password file"),
    ({"prometheusUsernameFile": "/u", "prometheusPasswordFile": "/p", "prometheusBearerTokenFile": "/t"},
     "exclude each other"),
    ({"prometheusTenant": "a\tb"}, "prometheusTenant 'a\\tb' must be 1-256 printable characters"),
    ({"prometheusStalenessSeconds": 600}, "prometheusStalenessSeconds"),
    ({"prometheusPodLabel": "namespace"}, "the namespace and pod labels must differ"),
    ({"prometheusExtraMatchers": "cluster=prod-1"}, "prometheusExtraMatchers 'cluster=prod-1' is not a list of label "
     "matchers like cluster=\"prod-1\""),
    ({"source": "prom"}, "is not one of scrape, prometheus"),
    ({"targets": [{"name": "t", "podSelector": "a=b", "source": "pods"}]}, "[0].source: 'pods' is not one of"),
    ({"source": "prometheus", "prometheusUrl": "http://p:9090", "prometheusTimeoutSeconds": 2},
     "prometheusTimeoutSeconds (2) must be shorter than scrapeIntervalSeconds (1)"),
])
def test_config_refuses_bad_prometheus_settings(tmp_path: Path, settings: dict[str, Any], problem: str) -> None:
    path = write_config(tmp_path / "c.yaml", **{**FAST_SETTINGS, "prometheusTimeoutSeconds": 0.8, **settings})
    with pytest.raises(ConfigError) as info:
        load_config(str(path), env={})
    assert [p for p in info.value.problems if problem in p] == info.value.problems


# -- issue 36: a series is evidence only about the pod it was scraped from; one namespace blinds only itself --------

FORGER = "10.66.0.9:9100"  # team-b's exporter, scraped with honor_labels: true: it writes any namespace/pod label


def forge(prig: PromRig, pod: str, name: str, value: float, instance: str = FORGER, **labels: str) -> None:
    """One sample of a series team-b's exporter labels with ``pod`` (its namespace and name)."""
    meta = prig.pods[pod]["metadata"]
    prig.prom.add(name, {"namespace": meta["namespace"], "pod": meta["name"], "job": "team-b/exporter",
                         "instance": instance, **labels}, BASE + prig.now + 10.0, value)


@pytest.mark.parametrize("instance", [FORGER, "127.0.0.2:8000"])
def test_a_series_forged_with_another_pods_labels_never_gets_that_pod_deleted(prig: PromRig, instance: str) -> None:
    # team-a's healthy pod makes progress; team-b's exporter exports a frozen busy engine 9 labelled with it --
    # from its own instance, or forging the pod's instance too. On main the pod was deleted: the confirmation read
    # the same forged series. A row not scraped from the pod's IP is no evidence; one that claims its instance
    # still cannot be confirmed: the removal is confirmed by the pod's own /metrics, where engine 9 is not.
    prig.deploy("victim", "127.0.0.2")
    reports = []
    for i in range(5):
        prig.engine("victim", running=2, tokens=100 * (i + 1))
        forge(prig, "victim", "vllm:num_requests_running", 4, instance, engine="9", model_name="m")
        forge(prig, "victim", "vllm:generation_tokens_total", 500, instance, engine="9", model_name="m")
        reports.append(prig.cycle())
    assert prig.exists(prig.pods["victim"])
    assert all(r.result != "deleted" for report in reports for _, r in report.remediations)
    if instance == FORGER:  # dropped: engine 9 is never seen
        assert by_pod(reports[-1]) == {"victim": ['engine="0",model_name="m":progressing']}
    else:  # seen stalled, never confirmed
        assert by_pod(reports[-1])["victim"] == ['engine="0",model_name="m":progressing',
                                                 'engine="9",model_name="m":stalled']
        (aborted,) = {r.detail for report in reports for _, r in report.remediations}
        assert "gave no evidence (no series)" in aborted and "http://127.0.0.2:8000/metrics" in aborted


def test_stalls_forged_in_two_other_tenants_never_open_the_fleet_breaker(emulator: EmulatorServer,
                                                                       prig: PromRig) -> None:
    # The attacker's exporter (honorLabels) forges a frozen busy engine 9 with the exact instance of two pods in
    # tenant b and two in tenant c: on main 5 of 5 voting pods looked stalled, 3 of 3 with any one tenant left out,
    # the fleet breaker opened and held back tenant d's genuine wedge. A stall counts in the breakers only once a
    # direct read of the pod showed it: the victims' own /metrics have no engine 9.
    for tenant in ("b", "c", "d"):
        emulator.create_namespace(f"team-{tenant}", {NAMESPACE_LABEL: "true"})
    victims = ["vb0", "vb1", "vc0", "vc1"]
    for pod, ip in zip(victims, range(2, 6), strict=True):
        prig.deploy(pod, f"127.0.0.{ip}", f"team-{pod[1]}")
    prig.deploy("wedged", "127.0.0.6", "team-d")

    def exists(pod: str) -> bool:
        meta = prig.pods[pod]["metadata"]
        return emulator.get_pod(meta["namespace"], meta["name"]) is not None
    reports = []
    for i in range(12):
        for pod in victims:
            prig.engine(pod, running=2, tokens=100 * (i + 1))
            forge(prig, pod, "vllm:num_requests_running", 4, f"{prig.ips[pod]}:8000", engine="9", model_name="m")
            forge(prig, pod, "vllm:generation_tokens_total", 500, f"{prig.ips[pod]}:8000", engine="9", model_name="m")
        if not exists("wedged"):
            break
        prig.engine("wedged", running=4, tokens=500)
        reports.append(prig.cycle())
        assert sample(prig, "vllm_watchdog_breaker_open") == 0
    assert not exists("wedged") and all(exists(pod) for pod in victims)
    assert [ref for report in reports for ref, r in report.remediations if r.result == "deleted"] == [
        "team-d/" + prig.pods["wedged"]["metadata"]["name"]]


def test_a_stall_forged_for_another_pod_never_drains_it_from_its_service(emulator: EmulatorServer, tmp_path: Path,
                                                                         prom: FakePrometheus,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    # The readiness gate (quarantine) under source prometheus: a frozen busy engine 9 forged with the victim's exact
    # instance read stalled, and the gate asked to drain the victim from its Service on that alone (no direct read,
    # unlike a removal). Now the gate takes a stall read from Prometheus only once the pod's own /metrics confirmed
    # it. (Each pod is its owner's last Ready one here -- the emulator's status patch replaces the conditions list,
    # Ready included -- so a wanted drain shows as held back by last_ready: what is asserted is who it was wanted for.)
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    prig = PromRig(emulator, tmp_path, prom, quarantine=True, quarantineAfterSeconds=2)
    try:
        for pod, ip in (("victim", "127.0.0.2"), ("wedged", "127.0.0.3")):
            prig.deploy(pod, ip)
            emulator.patch_object(f"/api/v1/namespaces/{NS}/pods/{prig.pods[pod]['metadata']['name']}",
                                  {"spec": {"readinessGates": [{"conditionType": GATE_CONDITION}]}})
        caplog.set_level("INFO", "watchdog.controller.quarantine")
        for i in range(6):  # two cycles of progress first (both gates admitted), then the forgery and the wedge
            prig.engine("victim", running=1, tokens=50 * (i + 1))
            if i >= 2:
                for name, value in (("vllm:num_requests_running", 4), ("vllm:generation_tokens_total", 500)):
                    forge(prig, "victim", name, value, "127.0.0.2:8000", engine="9", model_name="m")
            prig.engine("wedged", running=4, tokens=100 * min(i, 2))
            prig.cycle()
        wanted = {r.getMessage().split()[2].split("/")[1].split("-")[0] for r in caplog.records
                  if r.getMessage().startswith("quarantine of ")}
        assert wanted == {"wedged"}
    finally:
        prig.close()


def test_genuine_stalls_in_four_tenants_still_open_the_fleet_breaker(emulator: EmulatorServer,
                                                                    prig: PromRig) -> None:
    # The other side of the rule above: a stall the pod's own /metrics shows is confirmed in the cycle it is first
    # seen (one direct read per pod), so a real storm across tenants still opens the breaker and removes nothing.
    tenants = ("b", "c", "d", "e")  # 3 of 3 with any one left out
    for ip, tenant in enumerate(tenants, start=2):
        emulator.create_namespace(f"team-{tenant}", {NAMESPACE_LABEL: "true"})
        prig.deploy(tenant, f"127.0.0.{ip}", f"team-{tenant}")
    reports = []
    for _ in range(12):
        for tenant in tenants:
            prig.engine(tenant, running=4, tokens=500)
        reports.append(prig.cycle())
    assert sample(prig, "vllm_watchdog_breaker_open") == 1
    assert {r.rule for report in reports for _, r in report.remediations} == {"breaker"}


def test_a_pause_forged_for_another_pod_does_not_hold_its_wedge(prig: PromRig) -> None:
    # On main team-c's wedged pod stayed paused for as long as team-b exported the pod-scoped gauge labelled with it.
    prig.deploy("wedged", "127.0.0.2")
    reports = []
    for _ in range(4):
        prig.engine("wedged", running=4, tokens=500)
        forge(prig, "wedged", "vllm:rl_weight_update_operations_in_flight", 1, operation="update")
        reports.append(prig.cycle())
    assert [states(r) for r in reports[:3]] == [{"wedged": "suspect"}] * 2 + [{"wedged": "stalled"}]
    assert remediated(reports[2]) == [(f"{NS}/{prig.pods['wedged']['metadata']['name']}", "deleted")]


def test_two_instances_claiming_one_engine_series_are_a_conflict_never_evidence(prig: PromRig) -> None:
    # The same engine series from the pod's own port and from another port of its IP (a forger naming the pod's IP):
    # which one is the engine is unknown. On main the largest (the forged, frozen) was read and the pod deleted.
    prig.deploy("victim", "127.0.0.2")
    reports = []
    for i in range(4):
        prig.engine("victim", running=2, tokens=100 * (i + 1))
        forge(prig, "victim", "vllm:num_requests_running", 4, "127.0.0.2:9999", engine="0", model_name="m")
        forge(prig, "victim", "vllm:generation_tokens_total", 10**9, "127.0.0.2:9999", engine="0", model_name="m")
        reports.append(prig.cycle())
    assert all(r.scrapes == {"prometheus_unknown": 1} and r.remediations == [] for r in reports)
    assert prig.exists(prig.pods["victim"])
    detail = prig.wd.pods[prig.pods["victim"]["metadata"]["uid"]].scrape_detail
    assert detail.startswith("conflict: the engine series {engine=\"0\",model_name=\"m\"} is claimed by 2 instances")


def test_an_unreachable_pod_is_never_removed_on_prometheus_alone(prig: PromRig) -> None:
    # The direct read is unknown (a NetworkPolicy, nothing listening): the stall stands, nothing is removed.
    prig.deploy("wedged", "127.0.0.2")
    reports = []
    for _ in range(4):
        prig.engine("wedged", running=4, tokens=500)
        prig.direct.bodies.clear()
        reports.append(prig.cycle())
    assert states(reports[-1]) == {"wedged": "stalled"} and prig.exists(prig.pods["wedged"])
    details = [r.detail for report in reports for _, r in report.remediations]
    assert details[0].startswith("not confirmed: scrape of http://127.0.0.2:8000/metrics failed (refused): "
                                 "connection refused"), details
    # the failed read backs the pod off: not read in the next cycle (watchdog/controller/confirmations.py)
    assert details[1].startswith("not confirmed: its confirmation read failed (1 in a row): read again in 1 "
                                 "cycle(s) (backoff)"), details


def hog(prom: FakePrometheus, namespace: str, pod: str, t: float, series: int = 40) -> None:
    """``series`` running series of one pod with 2 KiB model names: a fleet-wide answer far over 64 KiB."""
    for i in range(series):
        prom.add("vllm:num_requests_running", {"namespace": namespace, "pod": pod, "engine": "0", "job": "hog",
                                               "instance": "10.1.1.1:8000", "model_name": f"{i}-" + "x" * 2048},
                 t, 1.0)


@pytest.mark.parametrize("watched", [False, True])
def test_one_namespaces_huge_series_make_only_its_own_pods_unknown(emulator: EmulatorServer, tmp_path: Path,
                                                                   prom: FakePrometheus, watched: bool) -> None:
    # team-b's pod exports many big series; on main every query's answer was over prometheusMaxBytes and every pod
    # of every namespace unknown: team-a's wedge was never deleted. Read per namespace, scoped to the watched pods,
    # only team-b's own pods pay for them (when it is watched at all).
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    emulator.create_namespace("team-b", {NAMESPACE_LABEL: "true"})
    rig = PromRig(emulator, tmp_path, prom, prometheusMaxBytes=64 * 1024)
    try:
        rig.deploy("wedged", "127.0.0.2")
        hogger = rig.deploy("hog", "10.1.1.1", "team-b") if watched else "hog-0"
        reports = []
        for _ in range(3):
            rig.engine("wedged", running=4, tokens=500)
            hog(prom, "team-b", hogger, BASE + rig.now + 10.0)
            reports.append(rig.cycle())
        assert remediated(reports[2]) == [(f"{NS}/{rig.pods['wedged']['metadata']['name']}", "deleted")]
        assert reports[2].scrapes == ({"ok": 1, "prometheus_error": 1} if watched else {"ok": 1})
        if watched:
            detail = rig.wd.pods[rig.pods["hog"]["metadata"]["uid"]].scrape_detail
            assert "larger than prometheusMaxBytes" in detail
        assert all('namespace="team-b"' in q for q, _ in prom.queries if "team-b" in q)
    finally:
        rig.close()


@pytest.mark.parametrize(("tenant_label", "hogs"), [("team", 5), ("", 5), ("team", 9)])
def test_one_tenants_slow_namespaces_never_make_another_tenants_pods_unknown(emulator: EmulatorServer,
                                                                            tmp_path: Path, prom: FakePrometheus,
                                                                            tenant_label: str, hogs: int) -> None:
    # A tenant (tenantLabel team=hog) owns five namespaces whose series make every query of theirs take longer than
    # prometheusTimeoutSeconds. On main one deadline was shared by every namespace's queries in three phases (all
    # time queries, then all value queries, then the time queries again): the hog's time queries held the slots
    # and the phases until the deadline and team-a's pods were unknown every cycle, its wedge never deleted. Each
    # namespace's queries now go on on their own, a free slot to the tenant with the fewest in flight. Without
    # tenantLabel (each namespace its own tenant) the five held all four slots until the deadline (a review's
    # finding): one query may take half the timeout, so four hanging namespaces free their slots halfway. Nine
    # namespaces of one tenant (tenantLabel) hold at most their share; nine without it are docs/tenancy.md's limit.
    for i in range(hogs):
        emulator.create_namespace(f"a-hog-{i}", {NAMESPACE_LABEL: "true", "team": "hog"})
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true", "team": "a"})
    rig = PromRig(emulator, tmp_path, prom, tenantLabel=tenant_label)
    try:
        rig.deploy("wedged", "127.0.0.2")
        pods = [rig.deploy(f"hog{i}", f"10.1.1.{i + 1}", f"a-hog-{i}") for i in range(hogs)]
        prom.slow = {f'namespace="a-hog-{i}"': 3.0 for i in range(hogs)}
        reports = []
        for _ in range(3):
            rig.engine("wedged", running=4, tokens=500)
            for i in range(hogs):
                rig.engine(f"hog{i}", running=1, tokens=7)
            reports.append(rig.cycle())
        assert remediated(reports[2]) == [(f"{NS}/{rig.pods['wedged']['metadata']['name']}", "deleted")]
        assert reports[2].scrapes == {"ok": 1, "prometheus_error": hogs}, reports[2].scrapes
        assert len(pods) == hogs
    finally:
        rig.close()


def test_a_removal_is_confirmed_on_each_declared_port_the_pods_engines_were_scraped_from(prom: FakePrometheus,
                                                                                       ) -> None:
    # Two containers on two ports (both declared), each scraped by Prometheus from the pod's IP; a third port only
    # a forged instance names (not declared) is never read.
    client = PrometheusClient(builders.prometheus_limits(prom.url, timeout_s=2.0))
    target = WatchedPod("uid-1", NS, "p", "127.0.0.2", 8000, "/metrics", "vllm", "vllm", "enforce", 0, None,
                        ports=(8000, 8001))
    for engine, port in (("0", 8000), ("1", 8001), ("2", 9999)):
        labels = {"namespace": NS, "pod": "p", "engine": engine, "model_name": "m", "instance": f"127.0.0.2:{port}"}
        prom.add("vllm:num_requests_running", labels, BASE - 5, 4)
        prom.add("vllm:generation_tokens_total", labels, BASE - 5, 500)
    read: list[str] = []
    body = {8000: 'vllm:num_requests_running{engine="0"} 4\nvllm:generation_tokens_total{engine="0"} 500\n',
            8001: 'vllm:num_requests_running{engine="1"} 4\nvllm:generation_tokens_total{engine="1"} 500\n'}

    def direct(pod: WatchedPod) -> Reading:
        read.append(pod.url)
        if pod.port not in body:
            return Reading("refused", detail=f"{pod.url}: connection refused")
        return Reading("ok", parse_exposition(body[pod.port], get_profile("vllm")))

    source = PrometheusSource(client, 60, "namespace", "pod", profiles={"vllm": get_profile("vllm")},
                              confirm_with=direct)
    record = PodRecord(0, 0.0)
    assert source.read_pods([(target, record)], BASE)["uid-1"].outcome == "ok"
    confirmed = source.confirm(target)
    assert read == ["http://127.0.0.2:8000/metrics", "http://127.0.0.2:8001/metrics"]
    assert confirmed.parsed is not None and [s.key for s in confirmed.parsed.series] == ['engine="0"', 'engine="1"']
    del body[8001]  # the second container does not answer: the confirmation is unknown, not port 8000's alone
    unknown = source.confirm(target)
    assert (unknown.outcome, unknown.parsed) == ("refused", None)

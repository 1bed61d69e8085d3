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
from watchdog.config.loader import ConfigError, load_config
from watchdog.controller import promsource
from watchdog.controller.cycle import CycleReport
from watchdog.controller.promsource import PrometheusSource
from watchdog.core.model import NAMESPACE_LABEL, WatchedPod
from watchdog.core.policy import Decision
from watchdog.core.profiles import Profile, get_profile
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, write_config

BASE = 1_700_000_000.0
PROM = {"source": "prometheus", "prometheusTimeoutSeconds": 0.8}


class PromRig(Rig):
    def __init__(self, api: EmulatorServer, tmp_path: Path, prom: FakePrometheus, **config: Any) -> None:
        super().__init__(api, make_config(tmp_path, prometheusUrl=prom.url, **{**PROM, **config}),
                         wall_clock=lambda: BASE + self.now)
        self.prom = prom
        self.pods: dict[str, dict[str, Any]] = {}

    def deploy(self, name: str, ip: str) -> str:
        self.pods[name] = self.deployment(name, _Addr(ip))["pod"]
        return str(self.pods[name]["metadata"]["name"])

    def engine(self, pod: str, *, running: float, tokens: float, engine: str = "0", at: float | None = None,
               **extra: str) -> None:
        """One Prometheus scrape of one vLLM engine of ``pod``, 5 s before the next cycle's query."""
        t = BASE + self.now + 15.0 - 5.0 if at is None else at
        labels = {"namespace": NS, "pod": self.pods[pod]["metadata"]["name"], "engine": engine,
                  "model_name": "m", "instance": "10.0.0.1:8000", "job": "vllm", **extra}
        self.prom.add("vllm:num_requests_running", labels, t, running)
        self.prom.add("vllm:generation_tokens_total", labels, t, tokens)

    def up(self, pod: str, value: float) -> None:
        self.prom.add("up", {"namespace": NS, "pod": self.pods[pod]["metadata"]["name"], "job": "vllm"},
                      BASE + self.now + 10.0, value)


class _Addr:
    def __init__(self, ip: str) -> None:
        self.address, self.port = ip, 8000


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
        # one query per vllm signal slot (13) + up, and the time query before and after them, whatever the number
        # of pods; time = the wall clock
        fleet = [(q, at) for q, at in prig.prom.queries[before:] if 'pod="' not in q]
        assert len(fleet) == 16 and {at for _, at in fleet} == {BASE + prig.now}
        assert fleet[0][0] == fleet[-1][0] and "(timestamp(vllm:num_requests_running) >= " in fleet[0][0]
    assert [states(r) for r in reports] == [
        {"wedged": "suspect", "busy": "suspect"}, {"wedged": "suspect", "busy": "progressing"},
        {"wedged": "stalled", "busy": "progressing"}]
    # the detector ran on Prometheus' timestamps (moved onto the monotonic clock: 15 s apart, 5 s before now)
    assert [v.t for ref, _, v in reports[2].verdicts if "wedged" in ref] == [prig.now - 5.0]
    assert remediated(reports[2]) == [(f"{NS}/{prig.pods['wedged']['metadata']['name']}", "deleted")]
    assert not prig.exists(prig.pods["wedged"]) and prig.exists(prig.pods["busy"])
    # the confirmation ran the same queries restricted to the pod
    restricted = [q for q, _ in prig.prom.queries if f'pod="{prig.pods["wedged"]["metadata"]["name"]}"' in q]
    name = prig.pods["wedged"]["metadata"]["name"]
    assert len(restricted) == 15
    running = f'vllm:num_requests_running{{namespace="inference",pod="{name}"}}'
    assert (f"max by (namespace, pod, engine, model_name) (sum by (namespace, pod, engine, model_name, job, instance, "
            f"endpoint, container, service) (last_over_time({running}[60s]) and {running}))") in restricted
    assert reports[2].scrapes == {"ok": 2}


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
        prig.engine("pair", running=4, tokens=500, engine="0", at=at, instance="10.0.0.1:8000")
        prig.engine("pair", running=2, tokens=100 * (i + 1), engine="1", at=at + 4.0, instance="10.0.0.1:8001")
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
        prig.engine("pair", running=2, tokens=100 * (i + 1), engine="0", at=at, instance="10.0.0.1:8000")
        if i < 3 or i == 5:  # target b delivers nothing new in cycles 3 and 4
            prig.engine("pair", running=4, tokens=500, engine="1", at=at + 4.0, instance="10.0.0.1:8001")
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
            labels = {"namespace": NS, "pod": name, "engine": "0", "model_name": "m", "instance": "i", "job": "j"}
            deleted_at, held = None, []
            for i in range(12):
                racy.timed.clear()
                for at, tokens in ((BASE + rig.now + 2.5, 100.0 * min(max(i - 1, 0), 4)),
                                   (BASE + rig.now + 10.0, 100.0 * min(i, 4))):  # the newest, 5 s before the query
                    scrape = [("vllm:num_requests_running", labels, at, 4.0),
                              ("vllm:generation_tokens_total", labels, at, tokens),
                              ("up", {"namespace": NS, "pod": name, "job": "j"}, at, 1.0)]
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


def confirm_read(source: PrometheusSource, profile: Profile, target: WatchedPod, at: float) -> tuple[str, Any]:
    """The source's confirmation of ``target`` (of ``profile``) queried at ``at``: (outcome, parsed)."""
    source.profiles, source.wall_clock = {target.target_name: profile}, lambda: at
    reading = source.confirm(target)
    return reading.outcome, reading.parsed


def test_the_confirmation_before_a_deletion_reads_up_zero_and_staleness_as_unknown(prom: FakePrometheus) -> None:
    source = PrometheusSource(PrometheusClient(builders.prometheus_limits(prom.url, timeout_s=2.0)), 60, "namespace",
                              "pod")
    target = WatchedPod("uid-1", NS, "p", "127.0.0.2", 8000, "/metrics", "vllm", "vllm", "enforce", 0, None)
    labels = {"namespace": NS, "pod": "p", "engine": "0", "model_name": "m"}
    prom.add("vllm:num_requests_running", labels, BASE - 5, 4)
    prom.add("vllm:generation_tokens_total", labels, BASE - 5, 500)
    prom.add("up", {"namespace": NS, "pod": "p"}, BASE - 5, 1)
    outcome, parsed = confirm_read(source, get_profile("vllm"), target, BASE)
    assert outcome == "ok" and parsed is not None and parsed.series[0].running == 4.0
    assert confirm_read(source, get_profile("vllm"), target, BASE + 120) == ("prometheus_unknown", None)  # stale
    prom.add("up", {"namespace": NS, "pod": "p"}, BASE - 2, 0)  # its scrapes fail since the stall was judged
    assert confirm_read(source, get_profile("vllm"), target, BASE) == ("prometheus_unknown", None)


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
                              "instance": "10.0.0.1:8000", "operation": "update"}, BASE + prig.now + 10.0, 1.0)
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

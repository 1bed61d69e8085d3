"""One cycle end to end, in process: the Kubernetes API emulator (kmock-based, real HTTP; not a cluster), simulated
vLLM pods on 127.0.0.x, and a fake monotonic clock advanced 15 s per cycle so windows pass instantly."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import builders
import pytest
from cycle_kit import FAST_RATES, NS, Rig, make_config, remediated, sample, states

from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings
from watchdog.controller.cycle import CycleReport, Watchdog
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import pod_manifest, seed_deployment


@pytest.fixture
def api(emulator: EmulatorServer) -> EmulatorServer:
    emulator.create_namespace(NS, {NAMESPACE_LABEL: "true"})
    return emulator


@pytest.fixture
def rig(api: EmulatorServer, tmp_path: Path) -> Iterator[Rig]:
    r = Rig(api, make_config(tmp_path))
    yield r
    r.close()


def test_only_the_wedged_pod_is_deleted_after_the_window(rig: Rig) -> None:
    wedged = rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))
    idle = rig.deployment("idle", rig.sim("127.0.0.3", "idle"))
    busy = rig.deployment("busy", rig.sim("127.0.0.4", "progressing", rates=FAST_RATES))
    wedged_ref = f"{NS}/{wedged['pod']['metadata']['name']}"

    first = rig.cycle()
    assert first.pods == 3 and first.scrapes == {"ok": 3}
    # 1 namespace LIST + 1 pod LIST per default target (2) + once, at start, the Event LIST restoring the budget
    assert first.api_requests == 4
    assert states(first)["idle"] == "idle"
    second = rig.cycle()
    assert states(second) == {"wedged": "suspect", "idle": "idle", "busy": "progressing"}
    assert second.remediations == [] and rig.exists(wedged["pod"])

    third = rig.cycle()  # t - clock start = 30 s >= 5 s window, 3 busy samples
    assert states(third)["wedged"] == "stalled"
    assert remediated(third) == [(wedged_ref, "deleted")]
    assert not rig.exists(wedged["pod"])
    assert rig.exists(idle["pod"]) and rig.exists(busy["pod"])
    events = {(e["reason"], e["involvedObject"]["kind"], e["involvedObject"]["name"])
              for e in rig.api.list_events(NS)}
    assert events == {("StalledPodDeleted", "Pod", wedged["pod"]["metadata"]["name"]),
                      ("StalledPodDeleted", "Deployment", "wedged")}
    assert sample(rig, "vllm_watchdog_deletions_total", {"action": "delete"}) == 1.0
    assert sample(rig, "vllm_watchdog_deletions_total", {"action": "evict"}) == 0.0
    assert sample(rig, "vllm_watchdog_remediations_total", {"result": "deleted"}) == 1.0
    assert sample(rig, "vllm_watchdog_stalls_total") == 1.0
    assert sample(rig, "vllm_watchdog_pods_watched") == 3.0
    assert sample(rig, "vllm_watchdog_engines", {"state": "stalled"}) == 1.0

    for _ in range(2):
        later = rig.cycle()
        assert later.pods == 2 and later.remediations == []
        assert states(later) == {"idle": "idle", "busy": "progressing"}
    assert rig.exists(idle["pod"]) and rig.exists(busy["pod"])
    assert rig.wd.last_success == rig.now


def test_hanging_pod_is_unknown_and_never_deleted(api: EmulatorServer, tmp_path: Path) -> None:
    rig = Rig(api, make_config(tmp_path, scrapeDeadlineSeconds=0.3, connectTimeoutSeconds=0.2))
    try:
        sim = rig.sim("127.0.0.5", "hang")
        hung = rig.deployment("hung", sim)
        first = rig.cycle()
        assert first.scrapes == {"timeout": 1}
        # never answered: no engine series known yet, and the pod counts as one unknown engine
        assert first.verdicts == [] and first.engines == {"unknown": 1}
        assert sample(rig, "vllm_watchdog_engines", {"state": "unknown"}) == 1.0
        sim.set_mode("wedged")
        rig.cycle()
        assert states(rig.cycle()) == {"hung": "suspect"}
        sim.set_mode("hang")
        for _ in range(3):  # far past the window, but a scrape that times out is never evidence
            report = rig.cycle()
            assert report.scrapes == {"timeout": 1}
            assert states(report) == {"hung": "unknown"}
            assert report.remediations == []
        assert rig.exists(hung["pod"])
        assert rig.api.list_events(NS) == []
        assert sample(rig, "vllm_watchdog_scrapes_total", {"outcome": "timeout"}) == 4.0
        assert sample(rig, "vllm_watchdog_engines", {"state": "unknown"}) == 1.0
    finally:
        rig.close()


def recreate(api: EmulatorServer, pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    assert api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{meta['name']}")[0] == 200
    fresh = {**pod, "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations",
                                                      "ownerReferences")}}
    created = api.create_pod(fresh)
    assert created["metadata"]["uid"] != meta["uid"]
    assert created["status"]["podIP"] == pod["status"]["podIP"]
    return created


def test_state_is_keyed_by_uid_not_by_name_or_ip(rig: Rig) -> None:
    old = rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))["pod"]
    rig.cycle()
    assert states(rig.cycle()) == {"wedged": "suspect"}
    new = recreate(rig.api, old)  # same name, same IP and port, new UID: a different pod

    third = rig.cycle()
    assert third.remediations == [] and rig.exists(new)
    assert states(third) == {"wedged": "suspect"}
    assert set(rig.wd.pods) == {new["metadata"]["uid"]}  # the old pod's state is gone
    assert rig.cycle().remediations == []
    fifth = rig.cycle()  # the new pod's own window has passed
    assert remediated(fifth) == [(f"{NS}/{new['metadata']['name']}", "deleted")]
    assert not rig.exists(new)


def test_restart_count_change_resets_the_state(rig: Rig) -> None:
    pod = rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))["pod"]
    rig.cycle()
    assert states(rig.cycle()) == {"wedged": "suspect"}
    statuses = [{**pod["status"]["containerStatuses"][0], "restartCount": 1}]
    rig.api.patch_object(f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}",
                         {"status": {"containerStatuses": statuses}})

    third = rig.cycle()
    assert third.remediations == [] and rig.exists(pod)
    assert rig.wd.pods[pod["metadata"]["uid"]].restart_count == 1
    assert rig.cycle().remediations == []
    assert remediated(rig.cycle()) == [(f"{NS}/{pod['metadata']['name']}", "deleted")]


def test_api_requests_per_cycle_do_not_grow_with_pods(rig: Rig) -> None:
    sim = rig.sim("127.0.0.6", "idle")  # every pod points at the same simulated engine
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "uid": "rs-uid"}}

    def add(count: int) -> None:
        for _ in range(count):
            i = len(rig.api.list_objects(f"/api/v1/namespaces/{NS}/pods"))
            rig.api.create_pod(pod_manifest(NS, f"p{i}", sim.address, sim.port, owner=owner))

    def measured() -> tuple[int, int, list[tuple[str, str, str]]]:
        before = len(rig.api.emulator.request_log)
        report = rig.cycle()
        log = rig.api.emulator.request_log[before:]
        assert report.remediations == []
        return report.pods, report.api_requests, [(r.verb, r.resource, r.query) for r in log]

    start = rig.cycle()  # the first cycle also reads this watchdog's own Events once, to restore its budget
    assert start.api_requests == 4
    add(3)
    pods, count, log = measured()
    assert (pods, count, len(log)) == (3, 3, 3)
    assert [(verb, resource) for verb, resource, _ in log] == [("list", "namespaces"), ("list", "pods"),
                                                               ("list", "pods")]
    assert all("resourceVersion=0" in query for _, _, query in log)
    add(17)
    pods, count, log_20 = measured()
    assert (pods, count) == (20, 3)
    assert log_20 == log


def test_one_pods_failure_does_not_stop_the_cycle(rig: Rig, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    broken = rig.deployment("broken", rig.sim("127.0.0.3", "idle"))["pod"]
    wedged = rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))["pod"]
    original = Watchdog._judge

    def judge(self: Watchdog, target: Any, pod: Any, parsed: Any, report: CycleReport, *rest: Any) -> Any:
        if target.name == broken["metadata"]["name"]:
            raise RuntimeError("boom")
        return original(self, target, pod, parsed, report, *rest)

    monkeypatch.setattr(Watchdog, "_judge", judge)
    with caplog.at_level(logging.ERROR, logger="watchdog.controller.cycle"):
        reports = [rig.cycle() for _ in range(3)]
    assert all(r.pods == 2 for r in reports)
    assert remediated(reports[2]) == [(f"{NS}/{wedged['metadata']['name']}", "deleted")]
    assert rig.exists(broken)
    failures = [r for r in caplog.records if "judging pod" in r.getMessage()]
    assert len(failures) == 3 and all(r.exc_info for r in failures)
    assert rig.wd.last_success == rig.now


def test_discovery_failure_fails_the_whole_cycle(tmp_path: Path) -> None:
    kube = KubeClient.from_settings(KubeSettings(host="http://127.0.0.1:1", request_timeout_s=2))
    wd = builders.watchdog(make_config(tmp_path), kube, clock=lambda: 1.0)
    try:
        with pytest.raises(KubeError):
            wd.run_cycle()
        assert wd.last_success is None
    finally:
        wd.close()


def test_dry_run_namespace_announces_once_and_keeps_the_pod(api: EmulatorServer, tmp_path: Path) -> None:
    api.create_namespace("observe", {NAMESPACE_LABEL: "dry-run"})
    rig = Rig(api, make_config(tmp_path))
    try:
        sim = rig.sim("127.0.0.2", "wedged")
        pod = seed_deployment(api, "observe", "wedged", sim.address, sim.port)["pod"]
        results = [remediated(rig.cycle()) for _ in range(5)]
        ref = f"observe/{pod['metadata']['name']}"
        assert results == [[], [], [(ref, "dry_run")], [], []]
        assert api.get_pod("observe", pod["metadata"]["name"]) is not None
        assert sorted(e["reason"] for e in api.list_events("observe")) == ["StalledPodDryRun"] * 2
    finally:
        rig.close()


class FixedScraper:
    """A scraper stand-in that answers every URL with the same exposition body."""

    def __init__(self, body: str) -> None:
        self.body, self.urls = body.encode(), list[str]()

    def fetch(self, url: str) -> bytes:
        self.urls.append(url)
        return self.body

    def close(self) -> None:
        pass


# A wedge where the scheduler shows every request as waiting (running 0), counters frozen: what countWaiting is for.
WAITING_WEDGE = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 5.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 456789.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1234567.0
"""


@pytest.mark.parametrize(("count_waiting", "expected"), [(True, "deleted"), (False, None)])
def test_count_waiting_wedge_is_judged_and_acted_on_alike(api: EmulatorServer, tmp_path: Path,
                                                          count_waiting: bool, expected: str | None) -> None:
    scraper = FixedScraper(WAITING_WEDGE)
    rig = Rig(api, make_config(tmp_path, countWaiting=count_waiting), scraper=scraper)
    try:
        pod = seed_deployment(api, NS, "waiting", "10.0.0.9", 8000)["pod"]
        reports = [rig.cycle() for _ in range(3)]
        assert states(reports[2]) == {"waiting": "stalled" if count_waiting else "idle"}
        assert remediated(reports[2]) == ([(f"{NS}/{pod['metadata']['name']}", expected)] if expected else [])
        assert rig.exists(pod) is (expected is None)
        assert scraper.urls[0].split("?")[0] == "http://10.0.0.9:8000/metrics"
    finally:
        rig.close()


@pytest.mark.parametrize("pause", ["vllm:rl_weight_update_operations_in_flight",
                                   "vllm:sleep_mode_operations_in_flight"])
def test_a_pod_scoped_pause_pauses_every_engine_of_the_body_and_nothing_is_deleted(api: EmulatorServer,
                                                                                 tmp_path: Path, pause: str) -> None:
    # vLLM prints these gauges with the operation label only (no engine, no model_name): they are about the whole
    # server. Two engines busy and frozen far longer than the window while one reads 1: paused, never stalled.
    body = WAITING_WEDGE.replace('running{engine="0",model_name="m"} 0.0', 'running{engine="0",model_name="m"} 4.0')
    body += "".join(f"{line}\n" for line in body.replace('engine="0"', 'engine="1"').splitlines()
                    if not line.startswith("#")) + f'{pause}{{operation="update"}} 1.0\n'
    rig = Rig(api, make_config(tmp_path), scraper=FixedScraper(body))
    try:
        pod = seed_deployment(api, NS, "updating", "10.0.0.9", 8000)["pod"]
        reports = [rig.cycle() for _ in range(4)]
        assert [[(key, v.state) for _, key, v in r.verdicts] for r in reports] == [
            [('engine="0",model_name="m"', "paused"), ('engine="1",model_name="m"', "paused")]] * 4
        assert all(r.remediations == [] for r in reports) and rig.exists(pod)
    finally:
        rig.close()


def test_a_pod_that_never_answered_is_one_unknown_engine_and_its_failure_and_recovery_are_logged_once(
        api: EmulatorServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig(api, make_config(tmp_path, scrapeDeadlineSeconds=0.3, connectTimeoutSeconds=0.2))
    try:
        mute = rig.sim("127.0.0.5", "hang")
        pod = rig.deployment("mute", mute)["pod"]
        rig.deployment("idle", rig.sim("127.0.0.3", "idle"))
        with caplog.at_level(logging.INFO, logger="watchdog.controller"):
            failing = [rig.cycle() for _ in range(3)]  # t = 15, 30, 45
            assert [r.engines for r in failing] == [{"unknown": 1, "idle": 1}] * 3
            assert sample(rig, "vllm_watchdog_engines", {"state": "unknown"}) == 1.0
            mute.set_mode("idle")
            answered = [rig.cycle() for _ in range(2)]  # t = 60, 75
        assert [r.engines for r in answered] == [{"idle": 2}] * 2
        assert sample(rig, "vllm_watchdog_engines", {"state": "unknown"}) == 0.0
        failed = [r for r in caplog.records if "scrape of" in r.getMessage()]
        recovered = [r for r in caplog.records if "scrape works again" in r.getMessage()]
        assert len(failed) == 1 and len(recovered) == 1  # once each, not every cycle
        assert failed[0].levelname == "INFO" and failed[0].__dict__["result"] == "timeout"
        assert failed[0].__dict__["uid"] == pod["metadata"]["uid"]
        assert f"pod {NS}/{pod['metadata']['name']}: scrape of http://127.0.0.5:" in failed[0].getMessage()
        assert "(timeout: timeout after" in failed[0].getMessage()
        assert "after 45 s of failures (last: timeout: timeout after" in recovered[0].getMessage()
        record = rig.wd.pods[pod["metadata"]["uid"]]
        assert (record.outcome, record.outcome_since, record.scraped_at, record.scrape_detail) == ("ok", 60.0, 75.0, "")
    finally:
        rig.close()


class _Cyclic:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_cycle_runs_without_automatic_collections_and_frees_its_cyclic_garbage_at_the_end(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    rig.deployment("busy", rig.sim("127.0.0.7", "progressing"))
    seen: list[bool] = []
    garbage: list[weakref.ref[_Cyclic]] = []
    original = Watchdog._judge

    def judge(self: Watchdog, *args: Any) -> Any:
        seen.append(gc.isenabled())  # inside the cycle, in the middle of judging
        garbage.append(weakref.ref(_Cyclic()))  # unreachable at once, freed only by a collection
        return original(self, *args)

    monkeypatch.setattr(Watchdog, "_judge", judge)
    assert gc.isenabled()
    report = rig.cycle()
    assert report.scrapes == {"ok": 1}
    assert seen == [False]
    assert gc.isenabled()  # restored
    assert len(garbage) == 1 and garbage[0]() is None  # the collection at the end of the cycle freed it

    gc.disable()  # a caller that paused collections itself keeps them paused, and nothing is collected for it
    try:
        rig.cycle()
        assert not gc.isenabled()
        assert garbage[1]() is not None
    finally:
        gc.enable()
        gc.collect()


@pytest.mark.parametrize(("overrides", "asked"), [({}, "identity"), ({"scrapeEncoding": "gzip"}, "gzip")])
def test_the_scraper_asks_for_the_configured_encoding(tmp_path: Path, overrides: dict[str, str], asked: str) -> None:
    kube = KubeClient.from_settings(KubeSettings(host="http://127.0.0.1:1", request_timeout_s=2))
    wd = builders.watchdog(make_config(tmp_path, **overrides), kube, clock=lambda: 1.0)
    try:
        assert wd.sources["vllm"].scraper.headers["Accept-Encoding"] == asked  # type: ignore[attr-defined]
    finally:
        wd.close()


def test_the_default_scraper_fetches_and_parses_every_pod_on_its_loop(rig: Rig, monkeypatch: pytest.MonkeyPatch
                                                                      ) -> None:
    from watchdog.controller import scrapes

    parsed_on: list[str] = []
    real = scrapes.parse_exposition

    def recording(body: bytes, profile: Any) -> Any:
        parsed_on.append(threading.current_thread().name)
        return real(body, profile)

    monkeypatch.setattr(scrapes, "parse_exposition", recording)
    for i in range(2, 6):
        rig.deployment(f"d{i}", rig.sim(f"127.0.0.{i}", "idle"))
    report = rig.cycle()
    assert report.scrapes == {"ok": 4} and parsed_on == ["scrape-loop"] * 4  # each body parsed where it arrived
    assert all(0 < pod.scrape_seconds < 1 for pod in rig.wd.pods.values())
    assert rig.wd.fanout.size == 4  # the semaphore: at most as many at once as the pool would have threads



def test_a_sample_is_stamped_when_its_own_body_arrived_never_before(api: EmulatorServer, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The wedged pod's first read ends 2 s into its cycle: the stall clock starts there (17 s), not at the cycle's
    # start (15 s), so 30 s of proven no-progress end at 47 s: suspect at the 45 s cycle, stalled at 60 s.
    from watchdog.controller import scrapes

    rig = Rig(api, make_config(tmp_path, windowSeconds=30, minSamples=3))
    real, waits = scrapes.parse_exposition, [2.0]

    def slow_first_read(body: bytes, profile: Any) -> Any:
        rig.now += waits.pop() if waits else 0.0  # the clock moves while this pod's body is read
        return real(body, profile)

    monkeypatch.setattr(scrapes, "parse_exposition", slow_first_read)
    try:
        rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))
        seen = []
        for start in (15.0, 30.0, 45.0, 60.0):  # the scheduler's grid
            rig.now = start
            report = rig.wd.run_cycle()
            seen.append([(v.t, v.state) for _ref, _key, v in report.verdicts])
        assert seen == [[(17.0, "suspect")], [(30.0, "suspect")], [(45.0, "suspect")], [(60.0, "stalled")]]
    finally:
        rig.close()


def test_another_pods_wait_does_not_move_a_samples_time(api: EmulatorServer, tmp_path: Path) -> None:
    # A window of two whole intervals (30 s at 15 s). In the first cycle another pod keeps the cycle waiting 2 s
    # after the wedged pod's body arrived: stamped when the cycle judged, the wedged pod's samples would lie 28 s
    # apart at 45 s and its stall would come one interval late; stamped on arrival they lie 30 s apart.
    rig = Rig(api, make_config(tmp_path, windowSeconds=30, minSamples=3))
    try:
        wedged = rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))
        slow = rig.sim("127.0.0.3", "idle")
        rig.deployment("slow", slow)
        assert wedged["pod"]["metadata"]["uid"]
        loop = rig.wd.sources["vllm"].scraper  # type: ignore[attr-defined]
        real, waits, arrived = loop.fetch_async, [2.0], []

        async def fetch(url: str, deadline_s: float | None = None) -> bytes:
            body = await real(url, deadline_s)
            if "127.0.0.2" in url:
                arrived.append(True)  # its reading is taken before this loop runs anything else
            if slow.address in url and waits:
                for _ in range(500):  # until the wedged pod's body is in
                    if arrived:
                        break
                    await asyncio.sleep(0.01)
                rig.now += waits.pop()  # then this pod keeps the cycle 2 s longer
            return body

        loop.fetch_async = fetch  # type: ignore[method-assign]
        times = []
        for start in (15.0, 30.0, 45.0):  # the scheduler's grid
            rig.now = start
            report = rig.wd.run_cycle()
            times.append({ref.split("/")[1].split("-")[0]: v.t for ref, _key, v in report.verdicts})
        assert [t["wedged"] for t in times] == [15.0, 30.0, 45.0] and times[0]["slow"] == 17.0
        assert states(report)["wedged"] == "stalled"  # 30 s after its first busy sample, not 28 s
    finally:
        rig.close()

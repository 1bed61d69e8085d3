"""End to end: the real watchdog process (``python -m watchdog run``) against the Kubernetes API emulator and
simulated vLLM pods, all over real HTTP on loopback.

One world is built per module and observed while the watchdog runs (window 5 s, interval 1 s); each test
then asserts one behaviour on what happened. The emulator is not a real cluster: RBAC, kubelet grace periods
and Event aggregation are not exercised here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from watchdog.demo.controlplane.api import free_port, stop_process
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import (
    FAST_SETTINGS,
    pod_manifest,
    seed_deployment,
    seed_statefulset,
    write_config,
    write_kubeconfig,
)
from watchdog.demo.simpod import SimPod

pytestmark = pytest.mark.e2e

ENFORCE, DRY_RUN, UNLABELLED = "llm", "llm-canary", "llm-unlabelled"
OPEN_RAILS = {"maxDeletions": 10, "maxDeletionsPerNamespace": 10, "breakerFraction": 1.0, "minPodAgeSeconds": 0}


class HookPod(SimPod):
    """A simulated pod that runs ``hook`` once on the watchdog's re-scrape: the first scrape after the watchdog
    made its fresh GET of this pod (recorded by the emulator), i.e. the last look before a DELETE."""

    def __init__(self, *args: Any, hook: Callable[[HookPod], None], api: EmulatorServer, pod_path: Callable[[], str],
                 **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.hook, self.api, self.pod_path, self.fired = hook, api, pod_path, threading.Event()

    def exposition(self) -> bytes:
        if not self.fired.is_set():
            path = self.pod_path()
            if any(r.method == "GET" and r.path == path for r in list(self.api.emulator.request_log)):
                self.hook(self)
                self.fired.set()
        return super().exposition()


@dataclass
class World:
    api: EmulatorServer
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    sims: list[SimPod] = field(default_factory=list)
    recreated_uid: str = ""
    final_pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    log: str = ""
    metrics: str = ""

    def sim(self, address: str, mode: str, **kw: Any) -> SimPod:
        sim = kw.pop("cls", SimPod)(address, 0, mode, **kw)
        sim.start()
        self.sims.append(sim)
        return sim

    def events_on(self, kind: str, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if (e["involvedObject"]["kind"], e["involvedObject"]["name"]) == (kind, name)]

    def pod_exists(self, key: str) -> bool:
        meta = self.pods[key]["pod"]["metadata"]
        return (meta["namespace"], meta["name"]) in self.final_pods


def _build(world: World) -> None:
    api = world.api
    api.create_namespace(ENFORCE, {"vllm-watchdog.io/enabled": "true"})
    api.create_namespace(DRY_RUN, {"vllm-watchdog.io/enabled": "dry-run"})
    api.create_namespace(UNLABELLED)

    def deploy(key: str, ns: str, sim: SimPod, **kw: Any) -> None:
        world.pods[key] = seed_deployment(api, ns, key, sim.address, sim.port, **kw)

    deploy("busy", ENFORCE, world.sim("127.0.0.2", "progressing"))
    deploy("idle", ENFORCE, world.sim("127.0.0.3", "idle"))
    deploy("prefill", ENFORCE, world.sim("127.0.0.4", "prefill"))
    deploy("sleeping", ENFORCE, world.sim("127.0.0.12", "sleeping"))
    deploy("wedged", ENFORCE, world.sim("127.0.0.5", "wedged"))
    deploy("excluded", ENFORCE, world.sim("127.0.0.6", "wedged"),
           annotations={"vllm-watchdog.io/exclude": "true"})
    deploy("hung", ENFORCE, world.sim("127.0.0.7", "hang"))
    deploy("canary", DRY_RUN, world.sim("127.0.0.8", "wedged"))
    deploy("ignored", UNLABELLED, world.sim("127.0.0.9", "wedged"))

    def recover(pod: HookPod) -> None:
        pod.set_mode("progressing")
        time.sleep(0.05)  # let the counters move

    def path_of(key: str) -> Callable[[], str]:
        return lambda: f"/api/v1/namespaces/{ENFORCE}/pods/{world.pods[key]['pod']['metadata']['name']}"

    deploy("recovers", ENFORCE, world.sim("127.0.0.10", "wedged", cls=HookPod, hook=recover, api=api,
                                          pod_path=path_of("recovers")))

    def recreate(pod: HookPod) -> None:
        # The StatefulSet controller replaces the pod under the same name (and here, the same IP) between the
        # watchdog's decision and its DELETE; the new pod is healthy.
        meta = world.pods["sts"]["pod"]["metadata"]
        api.request("DELETE", f"/api/v1/namespaces/{ENFORCE}/pods/{meta['name']}")
        new = api.create_pod(pod_manifest(ENFORCE, meta["name"], pod.address, pod.port,
                                          owner=world.pods["sts"]["statefulset"]))
        world.recreated_uid = new["metadata"]["uid"]
        # The new pod's engine starts after this re-scrape is answered: the answer still confirms the stall
        # (every signal as frozen as before), so only the UID precondition stands between it and the DELETE.
        threading.Timer(0.5, pod.set_mode, ("progressing",)).start()

    sts_sim = world.sim("127.0.0.11", "wedged", cls=HookPod, hook=recreate, api=api, pod_path=path_of("sts"))
    world.pods["sts"] = seed_statefulset(api, ENFORCE, "sts", sts_sim.address, sts_sim.port)


def _done(world: World) -> bool:
    api = world.api
    wedged = world.pods["wedged"]["pod"]["metadata"]["name"]
    hooks = [s for s in world.sims if isinstance(s, HookPod)]
    dry = api.list_events(DRY_RUN)
    return api.get_pod(ENFORCE, wedged) is None and bool(dry) and all(h.fired.is_set() for h in hooks)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("e2e")
    with EmulatorServer() as api:
        world = World(api)
        proc = None
        try:
            _build(world)
            port = free_port()
            # The safety rails are proven in tests/controller/test_rails.py and tests/core/test_policy.py; here they
            # are opened wide so that each scenario of this world is judged on its own (5 of 9 watched pods look bad
            # on purpose).
            config = write_config(tmp / "config.yaml", **{**FAST_SETTINGS, **OPEN_RAILS,
                                                          "listenAddress": f"127.0.0.1:{port}"})
            kubeconfig = write_kubeconfig(tmp / "kubeconfig", api.base_url)
            log_path = tmp / "watchdog.log"
            with open(log_path, "w") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "watchdog", "run", "--config", str(config), "--kubeconfig",
                     str(kubeconfig)],
                    stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
                deadline = time.monotonic() + 40
                while time.monotonic() < deadline and proc.poll() is None and not _done(world):
                    time.sleep(0.25)
                time.sleep(3)  # three more cycles: nothing else may be deleted, no Event repeated
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    world.metrics = resp.read().decode()
            world.final_pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p
                                for p in api.list_objects("/api/v1/pods")}
            world.events = api.list_events()
        finally:
            stop_process(proc, 10)
            for sim in world.sims:
                sim.stop()
        world.log = (tmp / "watchdog.log").read_text()
        yield world


def test_only_the_wedged_pod_is_deleted(world: World) -> None:
    assert not world.pod_exists("wedged"), world.log[-3000:]
    kept = ["busy", "idle", "prefill", "sleeping", "excluded", "hung", "canary", "ignored", "recovers"]
    assert {k: world.pod_exists(k) for k in kept} == dict.fromkeys(kept, True)
    assert "Traceback" not in world.log


def test_a_long_prefill_progresses_and_a_sleeping_engine_is_paused(world: World) -> None:
    for key, state, why in (("prefill", "progressing",
                             "progressing: 1 running, vllm:kv_cache_usage_perc moving"),
                            ("sleeping", "paused", "paused: the engine reports it is paused or sleeping")):
        name = world.pods[key]["pod"]["metadata"]["name"]
        changes = [line for line in world.log.splitlines() if name in line and " -> " in line]
        assert changes and f"-> {why}" in changes[-1] and why.startswith(state), changes
        assert not world.events_on("Pod", name)


def test_events_on_pod_and_owner_carry_the_evidence(world: World) -> None:
    pod = world.pods["wedged"]["pod"]["metadata"]
    on_pod = world.events_on("Pod", pod["name"])
    on_deploy = world.events_on("Deployment", "wedged")
    assert len(on_pod) == 1 and len(on_deploy) == 1
    for event in on_pod + on_deploy:
        assert event["type"] == "Warning" and event["reason"] == "StalledPodDeleted"
        assert event["source"]["component"] == "vllm-stall-watchdog"
        assert event["reportingComponent"] == "vllm-stall-watchdog"
        msg = event["message"]
        assert msg.startswith(f"Deleted pod {ENFORCE}/{pod['name']} engine {{engine=\"0\""), msg
        for text in (": no progress for ", " s, 21 requests running", ", frozen vllm:generation_tokens_total="):
            assert text in msg
        # the slack clause only when the stall reached the window within it (no progress for 4.97 s, say)
        assert re.search(r"Why: stalled past the 5 s window \(global(; less its 0\.05 s slack)?\) over \d+ busy",
                         msg), msg
        assert re.search(r" since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\. Why: ", msg), msg
        assert len(msg.encode()) <= 1024
    assert on_pod[0]["involvedObject"]["uid"] == pod["uid"]
    assert on_deploy[0]["involvedObject"]["uid"] == world.pods["wedged"]["deployment"]["metadata"]["uid"]
    # No Event on the intermediate ReplicaSet: the top controller owner is the Deployment.
    assert not world.events_on("ReplicaSet", world.pods["wedged"]["replicaset"]["metadata"]["name"])


def test_dry_run_namespace_gets_one_dry_run_event_and_keeps_its_pod(world: World) -> None:
    assert world.pod_exists("canary")
    name = world.pods["canary"]["pod"]["metadata"]["name"]
    reasons = [e["reason"] for e in world.events if e["involvedObject"]["namespace"] == DRY_RUN]
    assert sorted(reasons) == ["StalledPodDryRun", "StalledPodDryRun"]  # pod + Deployment, once each
    message = world.events_on("Pod", name)[0]["message"]
    assert message.startswith(f"Would delete pod {DRY_RUN}/{name} engine ") and re.search(
        r"; dry-run, namespace is labelled dry-run\. evidence: [0-9a-f]{8}-\d{10} in the watchdog log\.$",
        message), message


def test_unlabelled_namespace_and_excluded_pod_are_ignored(world: World) -> None:
    assert world.pod_exists("ignored") and world.pod_exists("excluded")
    assert not any(e["involvedObject"]["namespace"] == UNLABELLED for e in world.events)
    excluded = world.pods["excluded"]["pod"]["metadata"]["name"]
    assert not world.events_on("Pod", excluded)
    assert "excluded" in world.log and excluded not in world.log


def test_same_name_pod_recreated_between_decision_and_delete_is_not_deleted(world: World) -> None:
    name = world.pods["sts"]["pod"]["metadata"]["name"]
    assert world.recreated_uid, "the re-scrape hook never fired"
    survivor = world.final_pods[(ENFORCE, name)]
    assert survivor["metadata"]["uid"] == world.recreated_uid
    assert "remediation conflict" in world.log
    assert not world.events_on("Pod", name)


def test_pod_that_recovers_just_before_deletion_is_kept(world: World) -> None:
    assert world.pod_exists("recovers")
    assert "engine recovered before deletion" in world.log
    assert not world.events_on("Pod", world.pods["recovers"]["pod"]["metadata"]["name"])


def test_hung_metrics_endpoint_is_unknown_never_deleted(world: World) -> None:
    assert world.pod_exists("hung")
    timeouts = next(line for line in world.metrics.splitlines()
                    if line.startswith('vllm_watchdog_scrapes_total{outcome="timeout"}'))
    assert float(timeouts.split()[-1]) >= 3
    assert exposed_sum(world.metrics, "vllm_watchdog_remediations_total", 'result="deleted"') == 1.0
    assert exposed_sum(world.metrics, "vllm_watchdog_remediations_total", 'result="conflict"') == 1.0


def exposed_sum(exposition: str, name: str, label: str) -> float:
    """The sum over a per-workload metric's series (namespace, target) that carry ``label``, as sum by () reads it."""
    return sum(float(line.split()[-1]) for line in exposition.splitlines()
               if line.startswith(name + "{") and label in line.split("}", 1)[0])

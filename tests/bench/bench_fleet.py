"""Fleet benchmark (a script, not a test): the real watchdog cycle against N simulated vLLM pods.

    python tests/bench/bench_fleet.py [--sizes 100,500,2000] [--cycles 5] [--runs 3] [--workers N]

The world, all on loopback (127.0.0.0/8) and in separate processes so that only the watchdog's own work is
counted as the watchdog's:

- the Kubernetes API *emulator* (``fleet_emulator.py``: the project's kmock-based emulator, not a cluster),
  seeded with N pods in 10 opted-in namespaces (``vllm-watchdog.io/enabled=true``), owned by a ReplicaSet of
  a Deployment, each about 6 KiB of JSON like a real vLLM pod (env, volumes, managedFields, full status;
  ``--lean-pods``: 1 KiB);
- ``--servers`` pod-server processes (``fleet_server.py``, asyncio) serving the N pods on 127.10.x.y:8000
  with real-size vLLM V1 expositions (``expositions.py``), gzip like vLLM, counters rising once a second,
  answering after 5 ms (14 ms with 8 engines) as vLLM takes to render them; ``--eight-engine`` of the pods
  have 8 data-parallel engines (380 KB bodies), ``--slow`` answer after 2 s and ``--hung`` never answer
  (exact counts per block of 100 pods, at random positions);
- the watchdog side: a fresh process per run that builds ``build(config, KubeClient.from_settings(...))``
  with namespaces and pods from the watch-based cache (``PodCache``: one LIST in the warm-up cycle, then WATCH)
  with the production settings (deadline 3 s, connect timeout 1 s, workers per config unless ``--workers``,
  JSON logs at info to a file; deletion budgets and the minimum pod age lifted so every run may delete) but
  ``--interval`` 5 s and ``--window`` 15 s, and runs cycles on a fixed grid as the service's APScheduler job
  does (``max_instances=1``: a cycle that overruns the interval skips the slots it covers). One warm-up
  cycle, then ``--cycles`` measured cycles; one healthy pod wedges (counters frozen, running 21) at a random
  moment of the first measured interval, and cycles go on until the watchdog has deleted it.

Figures per run: cycle duration (median and max of the measured cycles), watchdog CPU seconds per
pod-scrape (``time.process_time`` of the watchdog process over the measured cycles, idle gaps included,
divided by the pods scraped), peak RSS (``ru_maxrss`` of the watchdog process; also before its first
cycle), Kubernetes API requests per cycle (median of ``CycleReport.api_requests``) and detection latency
(wedge -> DELETE sent; the table shows it minus the window). The table at the end is the median over
``--runs`` runs, with each figure's goal and the ratio to it. The machine is shared and small (see the load
average printed at start and end): the spread column is the honest error bar.

The pod servers close idle keep-alive connections after 2 s: in production vLLM's uvicorn closes them after
5 s and the watchdog comes back every 15 s, so every scrape opens a new connection; so it is here.

Side by side: the exec liveness probe of the original proposal (``exec_probe.py``), run ``--probe-checks``
times against a 1-engine and an 8-engine pod; its CPU per check over the watchdog's CPU per pod-scrape.

``--py-spy DIR`` records the watchdog side of the first run of the largest size with py-spy (if installed).

The anchor (``--prometheus [BINARY]``, Debian's ``/usr/bin/prometheus`` by default): a real Prometheus scrapes the
same fleet at the same interval during the runs (gzip, as Prometheus always asks; its own timeout 0.8 x the
interval), and each run prints its CPU per pod-scrape over the same minutes (``utime + stime`` of its process
over the scrapes it made: ``sum(count_over_time(up[...]))``) beside the watchdog's, and their ratio. It shares
the two cores with the watchdog, so the cycle durations of such a run are not the figures of a run without it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import math
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ -> "bench" package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # repository root -> "watchdog"

from bench import exec_probe

HERE = Path(__file__).resolve()
NAMESPACES = 10
POD_PORT = 8000
PRODUCTION_INTERVAL_S = 15.0
# Issue 15's goals at 2,000 pods with the default settings (the exec probe: ~75 ms per check, >70x).
GOAL_CYCLE_S = 4.0
IMAGE_ENV = {"MALLOC_ARENA_MAX": "2"}  # what the image's environment sets (Dockerfile), for the watchdog process
GOAL_CPU_MS = 1.0  # per pod-scrape: HTTP + inflate + parse + detect
GOAL_CPU_SHARE = 0.30  # of one core at the production interval
GOAL_RSS_MIB = 100.0
GOAL_API_PER_CYCLE = 1  # steady state: 0 (the watch-based cache) or 1
GOAL_LATENCY_SLACK_S = 2.0  # detection latency - window <= interval + this
GOAL_PROMETHEUS_SHARE = 1 / 3  # issue 40: the watchdog's CPU per pod-scrape <= a third of Prometheus' (--prometheus)
RAILS_LIFTED = {"max_deletions": 1000, "max_deletions_per_namespace": 1000, "min_pod_age_seconds": 0}
LOOPBACK_PODS = {"allow_loopback_pod_ips": True}  # the simulated pods' IPs are 127.x addresses (tests only)


# -- the fleet ---------------------------------------------------------------------------------------------
@dataclass
class PodPlan:
    index: int
    address: str
    kind: str  # ok | slow | hung
    engines: int
    port: int = POD_PORT
    name: str = ""
    namespace: str = ""

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"


def plan_fleet(size: int, slow: float, hung: float, eight: float, seed: int) -> list[PodPlan]:
    """``size`` pods on 127.10.x.y; in every block of 100 pods, exactly round(fraction x 100) slow, hung and
    8-engine pods at random positions, so that every size that is a multiple of 100 has the same mix."""
    rng = random.Random(seed)
    plans: list[PodPlan] = []
    for block in range(math.ceil(size / 100)):
        positions = list(range(100))
        rng.shuffle(positions)
        n_hung, n_slow, n_eight = round(hung * 100), round(slow * 100), round(eight * 100)
        kinds = ["hung"] * n_hung + ["slow"] * n_slow + ["ok"] * (100 - n_hung - n_slow)
        engines = [8] * n_eight + [1] * (100 - n_eight)
        rng.shuffle(engines)
        for offset in range(100):
            i = block * 100 + offset
            address = f"127.10.{1 + i // 250}.{1 + i % 250}"
            plans.append(PodPlan(i, address, kinds[positions[offset]], engines[offset],
                                 namespace=f"fleet-{i % NAMESPACES:02d}"))
    return plans[:size]


class Processes:
    """Child processes started by this benchmark (ended by pid at exit, never by name)."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(argv, **kw)
        self.children.append(child)
        return child

    def stop(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


def start_pod_servers(procs: Processes, plans: list[PodPlan], servers: int, keepalive_s: float, slow_s: float,
                      tmp: Path, honour_names: bool = True) -> None:
    """Start ``servers`` fleet_server.py processes, pods dealt round-robin; fill in each plan's port."""
    children = []
    for s in range(servers):
        mine = plans[s::servers]
        spec = tmp / f"fleet-{s}.json"
        spec.write_text(json.dumps({"keepalive_s": keepalive_s, "slow_s": slow_s, "honour_names": honour_names,
                                    "pods": [[p.address, p.port, p.kind, p.engines] for p in mine]}))
        child = procs.start([sys.executable, str(HERE.parent / "fleet_server.py"), str(spec)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        children.append((child, mine))
    for child, mine in children:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line:
            raise SystemExit("a pod server did not start")
        for plan, (_, port) in zip(mine, json.loads(line)["bound"], strict=True):
            plan.port = port


def start_emulator(procs: Processes, tmp: Path) -> str:
    log = open(tmp / "emulator.log", "wb")  # noqa: SIM115 - lives as long as the child
    child = procs.start([sys.executable, str(HERE.parent / "fleet_emulator.py")], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=log, cwd=HERE.parents[2])
    assert child.stdout is not None
    line = child.stdout.readline().decode()
    if "listening on" not in line:
        raise SystemExit(f"the emulator did not start: {line!r} (see {tmp / 'emulator.log'})")
    return line.split("listening on", 1)[1].strip()


# -- seeding the emulator ------------------------------------------------------------------------------------
def _managed_fields() -> list[dict[str, Any]]:
    spec_fields = {"f:containers": {'k:{"name":"vllm"}': {
        ".": {}, "f:args": {}, "f:env": {f'k:{{"name":"ENV_{i}"}}': {".": {}, "f:name": {}, "f:value": {}}
                                         for i in range(12)},
        "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:ports": {'k:{"containerPort":8000}': {}},
        "f:readinessProbe": {}, "f:resources": {}, "f:volumeMounts": {}}},
        "f:dnsPolicy": {}, "f:nodeSelector": {}, "f:tolerations": {}, "f:volumes": {}}
    status_fields = {"f:conditions": {f'k:{{"type":"{t}"}}': {".": {}, "f:lastTransitionTime": {}, "f:status": {},
                                                              "f:type": {}}
                                      for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                                                "ContainersReady", "PodScheduled")},
                     "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}
    return [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": "2026-11-20T08:00:00Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {}, "f:ownerReferences": {}},
                      "f:spec": spec_fields}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-20T08:04:00Z",
         "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": status_fields}},
    ]


def realistic_pod(plan: PodPlan, replicaset: dict[str, Any]) -> dict[str, Any]:
    """A vLLM pod as a real API server returns it (~6 KiB of JSON), pointing at the plan's address/port."""
    from watchdog.demo.scenario import VLLM_LABELS, pod_manifest

    rs_name = replicaset["metadata"]["name"]
    labels = {**VLLM_LABELS, "app": "llm", "pod-template-hash": rs_name.rsplit("-", 1)[-1]}
    pod = pod_manifest(plan.namespace, plan.name, plan.address, plan.port, labels=labels, owner=replicaset,
                       annotations={"prometheus.io/scrape": "true", "prometheus.io/port": str(plan.port),
                                    "kubectl.kubernetes.io/restartedAt": "2026-11-20T08:00:00Z"})
    meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
    meta["generateName"] = rs_name + "-"
    meta["managedFields"] = _managed_fields()
    container = spec["containers"][0]
    container.update({
        "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", str(plan.port), "--tensor-parallel-size",
                 "1", "--data-parallel-size", str(plan.engines), "--max-model-len", "32768",
                 "--gpu-memory-utilization", "0.92", "--enable-prefix-caching"],
        "env": [{"name": f"ENV_{i}", "value": f"value-{i}-" + "x" * 24} for i in range(12)],
        "resources": {"limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(plan.engines)},
                      "requests": {"cpu": "4", "memory": "48Gi", "nvidia.com/gpu": str(plan.engines)}},
        "volumeMounts": [{"name": n, "mountPath": p} for n, p in (("models", "/models"), ("shm", "/dev/shm"),
                                                                  ("cache", "/root/.cache"))]
        + [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True}],
        "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    })
    spec.update({
        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                    {"name": "cache", "emptyDir": {}},
                    {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace",
                                                    "fieldRef": {"apiVersion": "v1",
                                                                 "fieldPath": "metadata.namespace"}}]}}]}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300},
                        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300}],
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "nodeName": f"gpu-node-{plan.index // 8:04d}", "serviceAccountName": "default",
        "serviceAccount": "default", "schedulerName": "default-scheduler", "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst", "terminationGracePeriodSeconds": 30, "securityContext": {},
        "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
    })
    stamp = "2026-11-20T08:04:00Z"
    status.update({
        "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}], "startTime": "2026-11-20T08:00:05Z",
        "qosClass": "Burstable",
        "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
                       for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                 "PodScheduled")],
    })
    status["containerStatuses"][0].update({
        "image": "docker.io/vllm/vllm-openai:v0.11.0", "started": True,
        "imageID": "docker.io/vllm/vllm-openai@sha256:" + "ab" * 32, "containerID": "containerd://" + "cd" * 32,
        "state": {"running": {"startedAt": "2026-11-20T08:00:30Z"}}, "lastState": {},
    })
    return pod


class Seeder:
    """Creates the fleet's namespaces, Deployments/ReplicaSets and pods in the emulator (unrecorded requests).
    ``lean``: pods as ``scenario.pod_manifest`` makes them (~1 KiB of JSON) instead of :func:`realistic_pod`."""

    def __init__(self, url: str, lean: bool = False) -> None:
        from watchdog.demo.emulator import EmulatorClient

        self.client, self.lean = EmulatorClient(url), lean
        self.replicasets: dict[str, dict[str, Any]] = {}
        self.seeded = 0
        for n in range(NAMESPACES):
            ns = f"fleet-{n:02d}"
            self.client.create_namespace(ns, {"vllm-watchdog.io/enabled": "true"})
            apps = f"/apis/apps/v1/namespaces/{ns}"
            labels = {"app.kubernetes.io/name": "vllm", "app": "llm"}
            deploy = self.client.create_object(f"{apps}/deployments", {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llm", "namespace": ns},
                "spec": {"replicas": 0, "selector": {"matchLabels": labels}}})
            owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm",
                     "uid": deploy["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
            self.replicasets[ns] = self.client.create_object(f"{apps}/replicasets", {
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": "llm-7d9f8b6c5", "namespace": ns, "ownerReferences": [owner]},
                "spec": {"replicas": 0, "selector": {"matchLabels": labels}}})

    def create(self, plan: PodPlan) -> None:
        plan.name = f"llm-7d9f8b6c5-{plan.index:05d}{random.choice('abcdefghij')}"
        owner = self.replicasets[plan.namespace]
        if self.lean:
            from watchdog.demo.scenario import pod_manifest

            pod = pod_manifest(plan.namespace, plan.name, plan.address, plan.port, owner=owner)
        else:
            pod = realistic_pod(plan, owner)
        self.client.create_pod(pod)

    def ensure(self, plans: list[PodPlan], size: int) -> None:
        todo = plans[self.seeded:size]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(self.create, todo))
        self.seeded = max(self.seeded, size)


def post(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=5) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


# -- the watchdog side (a separate process per run) ----------------------------------------------------------
def watchdog_side(spec: dict[str, Any]) -> dict[str, Any]:
    """Run in the watchdog process: warm-up + measured cycles on a grid, then the wedge until its deletion."""
    from watchdog.adapters.kubeimport import lean_client

    lean_client()  # as `run` does, before anything imports the Kubernetes client
    from watchdog.adapters.kube import KubeClient, KubeSettings
    from watchdog.adapters.logs import setup_logging
    from watchdog.adapters.podcache import PodCache
    from watchdog.config.loader import load_config
    from watchdog.controller.wiring import build

    class TimedKube(KubeClient):
        """The real client; remembers when LISTs took and when a DELETE was sent."""

        list_s = 0.0
        deletes: list[tuple[float, str]] = []  # noqa: RUF012 - one instance per process

        def list_pods(self, label_selector: str, namespaces: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
            start = time.perf_counter()
            try:
                return super().list_pods(label_selector, namespaces)
            finally:
                self.list_s += time.perf_counter() - start

        def list_namespaces(self, label_selector: str) -> list[dict[str, Any]]:
            start = time.perf_counter()
            try:
                return super().list_namespaces(label_selector)
            finally:
                self.list_s += time.perf_counter() - start

        def delete_pod(self, namespace: str, name: str, uid: str, grace_period_s: int | None) -> Any:
            result = super().delete_pod(namespace, name, uid, grace_period_s)
            self.deletes.append((time.monotonic(), f"{namespace}/{name}"))
            return result

    config = load_config(None, env={}, flags=spec["settings"])
    setup_logging(config.log_format, config.log_level)
    kube = TimedKube.from_settings(KubeSettings(host=spec["emulator"], request_timeout_s=config.api_timeout_seconds))
    assert isinstance(kube, TimedKube)
    # Namespaces and pods from the watch-based cache as ``run`` has them (wiring.wire), but its informers start in
    # the warm-up cycle and may take 120 s for their first LIST (the emulator's 10,000 pods), not apiTimeoutSeconds.
    watchdog = build(config, kube, listing=PodCache(kube, first_sync_wait_s=120))
    rss_start_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # imports + setup, no cycle yet
    interval, cycles = spec["interval"], spec["cycles"]
    records: list[dict[str, Any]] = []
    t0 = time.monotonic()
    slot = 0
    wedge: dict[str, float] = {}

    def run_one() -> None:
        nonlocal slot
        wait = t0 + slot * interval - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        kube.list_s = 0.0
        cpu = time.process_time()
        report = watchdog.run_cycle()
        records.append({"start": time.monotonic() - t0 - report.duration_s, "duration": report.duration_s,
                        "cpu": time.process_time() - cpu, "pods": report.pods, "api": report.api_requests,
                        "list_s": kube.list_s, "scrapes": dict(report.scrapes),
                        "remediations": [(ref, r.result) for ref, r in report.remediations]})
        slot = int((time.monotonic() - t0) / interval) + 1  # max_instances=1: overrun slots are skipped

    def do_wedge() -> None:
        post(spec["wedge_url"] + "/sim/wedge")
        wedge["t"] = time.monotonic()

    run_one()  # warm-up: new detector states, new threads
    # The wedge happens at a random moment of the next interval; measured cycles go on meanwhile, and cycles go
    # on after them until the wedged pod is deleted (or long after it should have been).
    at = t0 + slot * interval + random.Random(spec["seed"]).uniform(0, interval)
    timer = threading.Timer(at - time.monotonic(), do_wedge)
    timer.start()
    give_up = at + spec["window"] + 4 * interval + 30
    cpu_start, wall_start = time.process_time(), time.monotonic()
    for _ in range(cycles):
        run_one()
    phase = {"cpu": time.process_time() - cpu_start, "wall": time.monotonic() - wall_start}
    while not kube.deletes and time.monotonic() < give_up:
        run_one()
    timer.cancel()
    watchdog.close()
    return {"records": records, "cycles": cycles, "phase": phase, "wedge_t": wedge.get("t"),
            "deletes": [(t, ref) for t, ref in kube.deletes], "t0": t0,
            "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rss_start_mib": rss_start_mib,
            "threads": threading.active_count()}


# -- one run, from the benchmark's side ----------------------------------------------------------------------
@dataclass
class RunResult:
    size: int
    cycle_median_s: float
    cycle_max_s: float
    cold_cycle_s: float
    cpu_ms_per_scrape: float
    cpu_cycle_s: float
    rss_mib: float
    rss_start_mib: float
    api_per_cycle: list[int]
    list_s: float
    every_s: float  # median time between cycle starts (more than the interval when cycles overrun it)
    latency_s: float | None
    false_deletions: list[str]
    scrapes: dict[str, int] = field(default_factory=dict)
    prometheus_ms: float | None = None  # the anchor's CPU per pod-scrape over the same run (--prometheus)


def run_once(args: argparse.Namespace, url: str, plans: list[PodPlan], size: int, run: int, tmp: Path,
             seeder: Seeder, py_spy: Path | None) -> RunResult:
    rng = random.Random(args.seed * 1000 + size * 10 + run)
    victim = rng.choice([p for p in plans[:size] if p.kind == "ok" and p.engines == 1])
    settings: dict[str, Any] = {
        "scrape_interval_seconds": args.interval, "window_seconds": args.window, "jitter_seconds": 0.0,
        "listen_address": "127.0.0.1:0", "log_format": "json", "log_level": "info",
    }
    if args.workers:
        settings["workers"] = args.workers
    # Every run deletes one pod: lift the deletion budgets (restored from earlier runs' Events) and the minimum
    # pod age (a re-created pod may be the next victim). Only settings this tree has.
    from watchdog.config.settings import SETTINGS

    known = {s.name for s in SETTINGS}
    settings.update({k: v for k, v in {**RAILS_LIFTED, **LOOPBACK_PODS}.items() if k in known})
    spec = {"emulator": url, "settings": settings, "interval": args.interval, "window": args.window,
            "cycles": args.cycles, "wedge_url": victim.url, "seed": rng.randrange(10**9)}
    spec_path, out_path = tmp / f"side-{size}-{run}.json", tmp / f"side-{size}-{run}.out.json"
    spec_path.write_text(json.dumps(spec))
    argv = [sys.executable, str(HERE), "--side", str(spec_path), str(out_path)]
    if py_spy is not None:
        tool = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        argv = [tool, "record", "--rate", "250", "--format", "raw", "-o", str(py_spy / f"watchdog-{size}.txt"),
                "--", *argv]
    with open(tmp / f"side-{size}-{run}.log", "wb") as log:
        subprocess.run(argv, stderr=log, stdout=log, check=True, timeout=600, cwd=HERE.parents[2],
                       env={**os.environ, **IMAGE_ENV})
    out = json.loads(out_path.read_text())

    victim_ref = f"{victim.namespace}/{victim.name}"
    # Put the world back: the wedged pod's server un-wedges, and its pod is re-created (a new uid).
    post(victim.url + "/sim/reset")
    for _, ref in out["deletes"]:
        deleted = next(p for p in plans if f"{p.namespace}/{p.name}" == ref)
        seeder.create(deleted)

    records = out["records"]
    measured = records[1:1 + out["cycles"]]
    durations = [r["duration"] for r in measured]
    scraped = sum(r["pods"] for r in measured)
    latency = None
    hits = [t for t, ref in out["deletes"] if ref == victim_ref]
    if hits and out["wedge_t"] is not None:
        latency = hits[0] - out["wedge_t"]
    scrapes: dict[str, int] = {}
    for r in measured:
        for k, v in r["scrapes"].items():
            scrapes[k] = scrapes.get(k, 0) + v
    return RunResult(
        size=size, cycle_median_s=statistics.median(durations), cycle_max_s=max(durations),
        cold_cycle_s=records[0]["duration"], cpu_ms_per_scrape=1000 * out["phase"]["cpu"] / scraped,
        cpu_cycle_s=out["phase"]["cpu"] / len(measured), rss_mib=out["maxrss_mib"], rss_start_mib=out["rss_start_mib"],
        api_per_cycle=[r["api"] for r in measured], list_s=statistics.median(r["list_s"] for r in measured),
        every_s=statistics.median(b["start"] - a["start"] for a, b in itertools.pairwise(records)),
        latency_s=latency, false_deletions=[ref for _, ref in out["deletes"] if ref != victim_ref],
        scrapes={k: v // len(measured) for k, v in scrapes.items()},
    )


# -- the anchor: a real Prometheus scraping the same fleet ----------------------------------------------------------
class Anchor:
    """A Prometheus (``binary``) scraping the fleet every ``interval_s`` through file_sd; :meth:`mark` and
    :meth:`ms_per_scrape` give its CPU per pod-scrape between two moments."""

    def __init__(self, binary: str, interval_s: float, tmp: Path) -> None:
        sys.path.insert(0, str(HERE.parents[1] / "prometheus"))
        from prom_kit import PrometheusServer

        (tmp / "anchor").mkdir()
        self.server = PrometheusServer(tmp / "anchor", binary=binary, scrape_interval_s=interval_s)
        self.server.start()

    def scrape(self, plans: list[PodPlan]) -> None:
        from prom_kit import FileTarget

        self.server.set_targets([FileTarget(f"{p.address}:{p.port}", p.namespace, p.name) for p in plans])

    def mark(self) -> tuple[float, float]:
        """(wall clock, CPU seconds of the Prometheus process so far)."""
        assert self.server.proc is not None
        fields = Path(f"/proc/{self.server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return time.time(), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def ms_per_scrape(self, start: tuple[float, float], end: tuple[float, float]) -> tuple[float, int]:
        """(CPU ms per pod-scrape, scrapes) between two :meth:`mark` s."""
        window = max(1, round(end[0] - start[0]))
        rows = self.server.query(f'sum(count_over_time(up{{job="vllm"}}[{window}s]))', time=f"{end[0]:.3f}")
        scrapes = int(float(rows[0]["value"][1])) if rows else 0
        return (1000 * (end[1] - start[1]) / scrapes if scrapes else float("nan")), scrapes

    def stop(self) -> None:
        self.server.stop()


# -- report --------------------------------------------------------------------------------------------------
def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def spread(values: list[float], spec: str) -> str:
    return f"{format(min(values), spec)}-{format(max(values), spec)}" if len(values) > 1 else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,500,2000", help="fleet sizes, comma-separated (default: %(default)s)")
    parser.add_argument("--cycles", type=int, default=5, help="measured cycles per run (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="runs per size; the table shows medians (default: 3)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between cycle starts (default: 5)")
    parser.add_argument("--window", type=float, default=15.0, help="stall window, seconds (default: 15)")
    parser.add_argument("--workers", type=int, default=0, help="scrape workers (default: the config default)")
    parser.add_argument("--slow", type=float, default=0.05, help="fraction of pods answering after 2 s (0.05)")
    parser.add_argument("--hung", type=float, default=0.01, help="fraction of pods never answering (0.01)")
    parser.add_argument("--eight-engine", type=float, default=0.10, help="fraction of 8-engine pods (0.10)")
    parser.add_argument("--servers", type=int, default=2, help="pod-server processes (default: 2)")
    parser.add_argument("--keepalive", type=float, default=2.0, help="pod servers' idle keep-alive, s (2)")
    parser.add_argument("--probe-checks", type=int, default=20, help="exec probe runs per body (default: 20)")
    parser.add_argument("--lean-pods", action="store_true", help="~1 KiB pod objects instead of ~6 KiB real-looking")
    parser.add_argument("--ignore-names", action="store_true",
                        help="the pods ignore ?name[]= and send every series (older vLLM releases)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--py-spy", type=Path, metavar="DIR", help="record the largest size's first run")
    parser.add_argument("--prometheus", nargs="?", const="/usr/bin/prometheus", metavar="BINARY",
                        help="the anchor: a real Prometheus scraping the same fleet (default binary: %(const)s)")
    parser.add_argument("--side", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        spec = json.loads(Path(args.side[0]).read_text())
        Path(args.side[1]).write_text(json.dumps(watchdog_side(spec)))
        return 0

    from watchdog.config.settings import SETTINGS

    sizes = sorted(int(s) for s in args.sizes.split(","))
    workers = args.workers or next(s.default for s in SETTINGS if s.name == "workers")
    started = time.monotonic()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; python "
          f"{sys.version.split()[0]}; workers {workers}; interval {args.interval:g} s, window {args.window:g} s, "
          f"deadline 3 s; fleet mix: {args.slow:.0%} slow (2 s), {args.hung:.0%} hung, "
          f"{args.eight_engine:.0%} with 8 engines; the pods {'ignore' if args.ignore_names else 'honour'} "
          f"?name[]=", flush=True)
    procs = Processes()
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    anchor = None
    try:
        plans = plan_fleet(max(sizes), args.slow, args.hung, args.eight_engine, args.seed)
        start_pod_servers(procs, plans, args.servers, args.keepalive, 2.0, tmp, not args.ignore_names)
        url = start_emulator(procs, tmp)
        seeder = Seeder(url, lean=args.lean_pods)

        one = next(p for p in plans if p.kind == "ok" and p.engines == 1)
        eight = next(p for p in plans if p.kind == "ok" and p.engines == 8)
        probe1 = exec_probe.measure(one.url + "/metrics", args.probe_checks)
        probe8 = exec_probe.measure(eight.url + "/metrics", args.probe_checks)
        print(f"exec probe: {probe1.cpu_s_per_check * 1000:.1f} ms CPU per check (1 engine), "
              f"{probe8.cpu_s_per_check * 1000:.1f} ms (8 engines); wall {probe1.wall_s_per_check * 1000:.0f} / "
              f"{probe8.wall_s_per_check * 1000:.0f} ms", flush=True)

        if args.prometheus:
            anchor = Anchor(args.prometheus, args.interval, tmp)
        results: dict[int, list[RunResult]] = {}
        print(f"{'pods':>5} {'run':>3} {'cold s':>7} {'cycle med':>9} {'max':>6} {'every s':>7} {'LISTs s':>7} "
              f"{'CPU ms/pod':>10} {'RSS MiB':>7} {'API/cyc':>7} {'latency':>7} {'-window':>7}  scrapes/cycle",
              flush=True)
        for size in sizes:
            t = time.monotonic()
            seeder.ensure(plans, size)
            print(f"seeded {size} pods in {time.monotonic() - t:.1f} s", flush=True)
            if anchor is not None:
                anchor.scrape(plans[:size])
                time.sleep(2 * args.interval)  # every target scraped before the first mark
            for run in range(args.runs):
                spy = args.py_spy if (args.py_spy and size == sizes[-1] and run == 0) else None
                if spy is not None:
                    spy.mkdir(parents=True, exist_ok=True)
                mark = None if anchor is None else anchor.mark()
                r = run_once(args, url, plans, size, run, tmp, seeder, spy)
                if anchor is not None and mark is not None:
                    r.prometheus_ms, scrapes = anchor.ms_per_scrape(mark, anchor.mark())
                    print(f"      Prometheus {r.prometheus_ms:.3f} ms CPU per pod-scrape over the same minutes "
                          f"({scrapes} scrapes); watchdog / Prometheus {r.cpu_ms_per_scrape / r.prometheus_ms:.2f}",
                          flush=True)
                results.setdefault(size, []).append(r)
                excess = None if r.latency_s is None else r.latency_s - args.window
                print(f"{size:>5} {run + 1:>3} {r.cold_cycle_s:>7.2f} {r.cycle_median_s:>9.2f} {r.cycle_max_s:>6.2f} "
                      f"{r.every_s:>7.1f} {r.list_s:>7.3f} {r.cpu_ms_per_scrape:>10.3f} {r.rss_mib:>7.1f} "
                      f"{statistics.median(r.api_per_cycle):>7g} {fmt(r.latency_s, '>7.1f')} {fmt(excess, '>7.1f')}  "
                      f"{r.scrapes}"
                      + (f"  FALSE DELETIONS: {r.false_deletions}" if r.false_deletions else ""), flush=True)
        print_table(args, sizes, results, probe1, probe8)
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end; total {time.monotonic() - started:.0f} s; "
              f"logs in {tmp}")
    finally:
        if anchor is not None:
            anchor.stop()
        procs.stop()
    return 0


def print_table(args: argparse.Namespace, sizes: list[int], results: dict[int, list[RunResult]],
                probe1: exec_probe.ProbeCost, probe8: exec_probe.ProbeCost) -> None:
    rows: list[tuple[str, str, str, str, str]] = []

    def row(name: str, values: list[float | None], spec: str, unit: str, goal: float | None, goal_text: str) -> None:
        known = [v for v in values if v is not None]
        med = statistics.median(known) if known else None
        ratio = "" if med is None or not goal else f"{med / goal:.2f}"
        rows.append((name, f"{fmt(med, spec)} {unit}".strip(), spread(known, spec), goal_text, ratio))

    goal_latency = args.interval + GOAL_LATENCY_SLACK_S
    for size in sizes:
        rs = results[size]
        row(f"{size} pods: cycle duration, median", [r.cycle_median_s for r in rs], ".2f", "s", GOAL_CYCLE_S,
            f"<= {GOAL_CYCLE_S:g} s")
        row(f"{size} pods: cycle duration, max", [r.cycle_max_s for r in rs], ".2f", "s", GOAL_CYCLE_S,
            f"<= {GOAL_CYCLE_S:g} s")
        row(f"{size} pods: CPU per pod-scrape", [r.cpu_ms_per_scrape for r in rs], ".3f", "ms",
            GOAL_CPU_MS, f"<= {GOAL_CPU_MS:g} ms")
        row(f"{size} pods: CPU share at 15 s interval", [100 * r.cpu_cycle_s / PRODUCTION_INTERVAL_S for r in rs],
            ".1f", "% core", 100 * GOAL_CPU_SHARE, f"< {GOAL_CPU_SHARE:.0%} of a core")
        row(f"{size} pods: peak RSS", [r.rss_mib for r in rs], ".1f", "MiB", GOAL_RSS_MIB, f"<= {GOAL_RSS_MIB:g} MiB")
        if any(r.prometheus_ms for r in rs):
            row(f"{size} pods: Prometheus CPU per pod-scrape", [r.prometheus_ms for r in rs], ".3f", "ms", None,
                "(the anchor, same runs)")
            row(f"{size} pods: watchdog / Prometheus CPU", [r.cpu_ms_per_scrape / r.prometheus_ms for r in rs
                                                            if r.prometheus_ms], ".2f", "", GOAL_PROMETHEUS_SHARE,
                f"<= {GOAL_PROMETHEUS_SHARE:.2f} (a third)")
        row(f"{size} pods: RSS before the first cycle", [r.rss_start_mib for r in rs], ".1f", "MiB", None,
            "(imports + setup)")
        row(f"{size} pods: API requests per cycle", [statistics.median(r.api_per_cycle) for r in rs], "g", "",
            GOAL_API_PER_CYCLE, f"0-{GOAL_API_PER_CYCLE} (steady state)")
        row(f"{size} pods: detection latency - window",
            [None if r.latency_s is None else r.latency_s - args.window for r in rs], ".1f", "s", goal_latency,
            f"<= interval + {GOAL_LATENCY_SLACK_S:g} = {goal_latency:g} s")
    mix = (1 - args.eight_engine) * probe1.cpu_s_per_check + args.eight_engine * probe8.cpu_s_per_check
    big = results[sizes[-1]]
    ours = statistics.median(r.cpu_ms_per_scrape for r in big) / 1000
    rows.append(("exec probe: CPU per check (fleet mix)", f"{mix * 1000:.1f} ms",
                 f"{probe1.cpu_s_per_check * 1000:.1f} / {probe8.cpu_s_per_check * 1000:.1f}",
                 "(1 / 8 engines)", ""))
    rows.append((f"exec probe / watchdog CPU ({sizes[-1]} pods)", f"{mix / ours:.0f}x", "", "", ""))
    rows.append((f"exec probe fleet CPU at 15 s ({sizes[-1]} pods)",
                 f"{100 * mix * sizes[-1] / PRODUCTION_INTERVAL_S:.0f} % core", "", "+ runtime exec cost", ""))
    header = ("figure", "median", "spread", "goal", "ratio to goal")
    widths = [max(len(r[i]) for r in [*rows, header]) for i in range(5)]
    print(f"\nmedian of {args.runs} runs; spread = min-max over runs; ratio = median / goal")
    for r in [header, *rows]:
        cells = zip(r, widths, strict=True)
        print("  ".join(c.ljust(w) if i in (0, 3) else c.rjust(w) for i, (c, w) in enumerate(cells)))


if __name__ == "__main__":
    sys.exit(main())

"""Helpers of the `prometheus` tier (fixtures in conftest.py): a real Prometheus on loopback whose targets come from
a file_sd file, labelled `namespace`/`pod` as Kubernetes SD would, and the real watchdog process (`source:
prometheus`) run against it and the API emulator, its /status recorded.

The tier runs on each of :data:`FLAVOURS`: Debian's Prometheus 2.42 (/usr/bin/prometheus), a Prometheus 3.x built
from the official Go module, and an HA pair of two 3.x replicas (external label ``replica`` a and b, each behind a
Thanos sidecar) queried through a deduplicating Thanos Query. The last two are built by
tests/prometheus/build_prometheus.sh (cached outside the clone). Without a flavour's binaries its tests are
skipped, except with CI=true, where a missing one fails them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from daemon_kit import unready

from watchdog.demo.controlplane.api import free_port, stop_process

HERE = Path(__file__).resolve().parent
PROMETHEUS = os.environ.get("PROMETHEUS_BINARY", "/usr/bin/prometheus")
SCRAPE_INTERVAL_S = 1.0
#: The servers the tier runs against: Debian's 2.42, the built 3.x, and the HA pair of 3.x behind Thanos Query.
FLAVOURS = ("2.42", "3.x", "ha-thanos")
REPLICA_LABEL = "replica"


def built(name: str) -> str:
    """The binary ``name`` (prometheus or thanos) where tests/prometheus/build_prometheus.sh puts it."""
    where = subprocess.run(["bash", str(HERE / "build_prometheus.sh"), "--print-dir", name], check=True,
                           capture_output=True, text=True).stdout.strip()
    return f"{where}/{name}"


@dataclass(frozen=True)
class FileTarget:
    """One file_sd target: ``address`` ("127.0.0.20:41234") labelled as Kubernetes SD labels a pod."""
    address: str
    namespace: str
    pod: str


class QueryApi:
    """The Prometheus HTTP API at ``url``: what the tests read (the watchdog reads it on its own)."""

    url = ""

    def query(self, expr: str, **params: str) -> list[dict[str, Any]]:
        """An instant query's ``result`` list (raises on an error answer)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr, **params})
        with urllib.request.urlopen(url, timeout=5) as answer:
            doc = json.load(answer)
        if doc.get("status") != "success":
            raise RuntimeError(f"query {expr!r}: {doc}")
        return list(doc["data"]["result"])

    def up(self) -> dict[str, float]:
        """``up`` per pod label, as Prometheus has it now."""
        return {r["metric"].get("pod", ""): float(r["value"][1]) for r in self.query('up{job="vllm"}')}

    def wait_up(self, expected: dict[str, float], timeout_s: float = 30.0) -> None:
        """Wait until ``up`` of each named pod has the expected value (1 or 0)."""
        deadline = time.monotonic() + timeout_s
        seen: dict[str, float] = {}
        while time.monotonic() < deadline:
            try:
                seen = self.up()
            except OSError:  # a Prometheus busy ingesting hundreds of new targets can miss the 5 s: ask again
                continue
            if all(seen.get(pod) == value for pod, value in expected.items()):
                return
            time.sleep(0.3)
        raise AssertionError(f"targets not as expected after {timeout_s} s: want {expected}, have {seen}")


class PrometheusServer(QueryApi):
    """A Prometheus on 127.0.0.1:<free port> with a 1 s scrape interval (timeout 0.8 of it) and one job (`vllm`)
    whose targets come from a file_sd JSON file (:meth:`set_targets`); with ``honor_job``, a second job
    (`exporter`, ``honor_labels: true``: a tenant's PodMonitor with ``honorLabels: true``) whose series keep the
    labels they expose, its targets from a second file (``set_targets(..., job="exporter")``); ``external_labels``
    as an HA replica has them. :meth:`stop` and :meth:`start` keep the port and the TSDB."""

    def __init__(self, workdir: Path, *, binary: str = PROMETHEUS, scrape_interval_s: float = SCRAPE_INTERVAL_S,
                 honor_job: bool = False, external_labels: dict[str, str] | None = None) -> None:
        self.workdir, self.binary = workdir, binary
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.sd_file = workdir / "targets.json"
        self.config_file = workdir / "prometheus.yml"
        self.log_file = workdir / "prometheus.log"
        self.data = workdir / "data"
        self.proc: subprocess.Popen[bytes] | None = None
        self.targets: list[FileTarget] = []
        self.sd_file.write_text("[]")
        jobs = [{"job_name": "vllm", "file_sd_configs": [{"files": [str(self.sd_file)], "refresh_interval": "1s"}]}]
        if honor_job:
            (workdir / "exporter.json").write_text("[]")
            jobs.append({"job_name": "exporter", "honor_labels": True, "file_sd_configs": [
                {"files": [str(workdir / "exporter.json")], "refresh_interval": "1s"}]})
        self.config_file.write_text(yaml.safe_dump({
            "global": {"scrape_interval": f"{scrape_interval_s:g}s",
                       "scrape_timeout": f"{round(800 * scrape_interval_s)}ms",
                       "evaluation_interval": "15s", "external_labels": external_labels or {}},
            "scrape_configs": jobs,
        }, sort_keys=False))

    def start(self, timeout_s: float = 30.0) -> None:
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={self.config_file}", f"--storage.tsdb.path={self.data}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        why = unready(self.proc, f"{self.url}/-/ready", timeout_s, answer_timeout_s=1)
        if why is not None:
            raise RuntimeError(f"prometheus {why}: {self.log_tail()}")

    def stop(self) -> None:
        stop_process(self.proc, 20)
        self.proc = None

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_file.read_text(errors="replace")[-chars:] if self.log_file.exists() else ""

    # -- targets ---------------------------------------------------------------------------------------------
    def set_targets(self, targets: Sequence[FileTarget], job: str = "vllm") -> None:
        """Replace the file_sd targets of ``job`` (written atomically: Prometheus re-reads the file on change)."""
        if job == "vllm":
            self.targets = list(targets)
        sd_file = self.sd_file if job == "vllm" else self.workdir / f"{job}.json"
        doc = [{"targets": [t.address], "labels": {"namespace": t.namespace, "pod": t.pod}} for t in targets]
        tmp = sd_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(sd_file)

    def add_target(self, target: FileTarget) -> None:
        self.set_targets([*(t for t in self.targets if t.address != target.address), target])

    def remove_target(self, address: str) -> None:
        self.set_targets([t for t in self.targets if t.address != address])


class ThanosReplica:
    """One replica of the HA pair: a Prometheus with ``replica=<name>`` and its Thanos sidecar (the StoreAPI the
    querier reads it through), started and stopped together as one Kubernetes pod of the pair would be."""

    def __init__(self, workdir: Path, name: str, prometheus: str, thanos: str, honor_job: bool = False) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.name, self.thanos = name, thanos
        self.prometheus = PrometheusServer(workdir, binary=prometheus, honor_job=honor_job,
                                           external_labels={REPLICA_LABEL: name})
        self.http_port, self.grpc_port = free_port(), free_port()
        self.log_file = workdir / "sidecar.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        self.prometheus.start(timeout_s)
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [self.thanos, "sidecar", f"--prometheus.url={self.prometheus.url}",
                 f"--tsdb.path={self.prometheus.data}", f"--http-address=127.0.0.1:{self.http_port}",
                 f"--grpc-address=127.0.0.1:{self.grpc_port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        why = unready(self.proc, f"http://127.0.0.1:{self.http_port}/-/ready", timeout_s, answer_timeout_s=1)
        if why is not None:
            raise RuntimeError(f"thanos sidecar {why}: {self.log_file.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        stop_process(self.proc, 20)
        self.proc = None
        self.prometheus.stop()


class HaPair(QueryApi):
    """Two Prometheus replicas scraping the same targets (``replica`` a and b), each with its Thanos sidecar, behind
    one Thanos Query that deduplicates by ``replica`` (``url``: the querier's HTTP API, what the watchdog reads).
    :meth:`stop_replica` takes one replica down (Prometheus and sidecar); :meth:`stop`/:meth:`start` all of it.
    With ``honor_job`` each replica has the honor_labels ``exporter`` job too."""

    def __init__(self, workdir: Path, prometheus: str, thanos: str, honor_job: bool = False) -> None:
        self.workdir, self.thanos = workdir, thanos
        self.replicas = [ThanosReplica(workdir / name, name, prometheus, thanos, honor_job) for name in ("a", "b")]
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_file = workdir / "query.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.targets: list[FileTarget] = []

    def start(self, timeout_s: float = 30.0) -> None:
        for replica in self.replicas:
            if replica.proc is None:
                replica.start(timeout_s)
        endpoints = {"endpoints": [{"address": f"127.0.0.1:{r.grpc_port}"} for r in self.replicas]}
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [self.thanos, "query", f"--http-address=127.0.0.1:{self.port}",
                 f"--grpc-address=127.0.0.1:{self.grpc_port}", f"--endpoint.sd-config={json.dumps(endpoints)}",
                 f"--query.replica-label={REPLICA_LABEL}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        why = unready(self.proc, f"{self.url}/-/ready", timeout_s, answer_timeout_s=1)
        if why is not None:
            raise RuntimeError(f"thanos query {why}: {self.log_tail()}")
        self.wait_replicas({r.name for r in self.replicas}, timeout_s)

    def stop(self) -> None:
        stop_process(self.proc, 20)
        self.proc = None
        for replica in self.replicas:
            replica.stop()

    def stop_replica(self, name: str) -> None:
        next(r for r in self.replicas if r.name == name).stop()

    def start_replica(self, name: str, timeout_s: float = 30.0) -> None:
        next(r for r in self.replicas if r.name == name).start(timeout_s)

    def healthy(self) -> set[str]:
        """The replicas the querier reads now: its healthy stores' ``replica`` labels (``/api/v1/stores``)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/stores", timeout=5) as answer:
            stores = [store for group in (json.load(answer).get("data") or {}).values() for store in group or []]
        return {labels[REPLICA_LABEL] for store in stores if not store.get("lastError")
                for labels in store.get("labelSets") or [] if REPLICA_LABEL in labels}

    def wait_replicas(self, names: set[str], timeout_s: float = 30.0) -> None:
        """Wait until the querier reads from exactly the replicas ``names``."""
        deadline = time.monotonic() + timeout_s
        seen: set[str] = set()
        while time.monotonic() < deadline:
            seen = self.healthy()
            if seen == names:
                return
            time.sleep(0.3)
        raise AssertionError(f"the querier reads replicas {seen}, not {names} after {timeout_s} s")

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_file.read_text(errors="replace")[-chars:] if self.log_file.exists() else ""

    def set_targets(self, targets: Sequence[FileTarget], job: str = "vllm") -> None:
        if job == "vllm":
            self.targets = list(targets)
        for replica in self.replicas:
            replica.prometheus.set_targets(targets, job)

    def add_target(self, target: FileTarget) -> None:
        self.set_targets([*(t for t in self.targets if t.address != target.address), target])

    def remove_target(self, address: str) -> None:
        self.set_targets([t for t in self.targets if t.address != address])


Server = PrometheusServer | HaPair


def _binaries(flavour: str) -> list[str]:
    if flavour == "2.42":
        return [PROMETHEUS]
    return [built("prometheus")] + ([built("thanos")] if flavour == "ha-thanos" else [])


def new_prometheus(workdir: Path, flavour: str = "2.42", honor_job: bool = False) -> Server:
    """A started server of ``flavour`` in ``workdir``, with the honor_labels ``exporter`` job when ``honor_job``
    (skips the test when a binary is missing, fails with CI=true)."""
    binaries = _binaries(flavour)
    missing = [b for b in binaries if not (shutil.which(b) or Path(b).is_file())]
    if missing:
        hint = "apt-get install prometheus" if flavour == "2.42" else "bash tests/prometheus/build_prometheus.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{', '.join(missing)} not found ({hint})")
        pytest.skip(f"{', '.join(missing)} not found: {hint}")
    server: Server = (HaPair(workdir, *binaries, honor_job=honor_job) if flavour == "ha-thanos"
                      else PrometheusServer(workdir, binary=binaries[0], honor_job=honor_job))
    try:
        server.start()
    except BaseException:  # what did start (a replica, a sidecar) must not outlive the test
        server.stop()
        raise
    return server


PROMETHEUS_SETTINGS: dict[str, Any] = {
    "source": "prometheus",
    "prometheusStalenessSeconds": 4.0,  # 4 Prometheus scrapes: a series whose newest sample is older is unknown
    "prometheusTimeoutSeconds": 0.5,
}
OPEN_RAILS = {"maxDeletions": 10, "maxDeletionsPerNamespace": 10, "breakerFraction": 1.0, "minPodAgeSeconds": 0}


class WatchdogRun:
    """The real watchdog process (``python -m watchdog run --config --kubeconfig``) with its log in ``log_file``
    and, every 0.25 s, its ``/status`` JSON appended to ``history`` as ``(time.monotonic(), document)``."""

    def __init__(self, config: Path, kubeconfig: Path, log_file: Path, status_port: int) -> None:
        self.config, self.kubeconfig, self.log_file = config, kubeconfig, log_file
        self.status_url = f"http://127.0.0.1:{status_port}/status"
        self.metrics_url = f"http://127.0.0.1:{status_port}/metrics"
        self.history: list[tuple[float, dict[str, Any]]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="status-poller", daemon=True)

    def start(self) -> WatchdogRun:
        with open(self.log_file, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "watchdog", "run", "--config", str(self.config), "--kubeconfig",
                 str(self.kubeconfig)], stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._poller.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.25):
            try:
                with urllib.request.urlopen(self.status_url, timeout=1) as answer:
                    self.history.append((time.monotonic(), json.load(answer)))
            except (OSError, ValueError):
                pass

    def stop(self) -> str:
        """Stop (SIGTERM) and return the log."""
        self._stop.set()
        if self._poller.is_alive():
            self._poller.join(5)
        stop_process(self.proc, 10)
        return self.log()

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the watchdog's own /metrics (0 when absent)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        with urllib.request.urlopen(self.metrics_url, timeout=2) as answer:
            for line in answer.read().decode().splitlines():
                head, _, value = line.rpartition(" ")
                if head in (f"{name}{{{want}}}", name if not want else ""):
                    return float(value)
        return 0.0


def pod_views(history: Sequence[tuple[float, dict[str, Any]]], pod: str,
              since: float = 0.0) -> list[dict[str, Any]]:
    """Every /status view of ``pod`` (its entry under "pods") recorded at or after ``since``."""
    return [p for at, doc in history if at >= since for p in doc.get("pods") or [] if p.get("pod") == pod]


def engine_states(views: Sequence[dict[str, Any]]) -> set[str]:
    return {str(e.get("state")) for view in views for e in view.get("engines") or []}


def outcomes(views: Sequence[dict[str, Any]]) -> set[str]:
    return {str((view.get("scrape") or {}).get("outcome")) for view in views}

"""A kubelet (and scheduler) stand-in for the real control plane, the way kwok plays one: a thread in the demo
(or test) process that talks to the real API server as the admin.

- creates Node objects (label ``kubernetes.io/hostname``) and sets their ``Ready`` condition;
- binds every Pending, unbound pod (``pods/binding``) to a node: the node its ``nodeSelector``
  ``kubernetes.io/hostname`` names, else round robin over the first ``schedulable`` nodes;
- "starts the container": gives the pod its own loopback address 127.10.x.y, starts a simulated vLLM engine
  (:class:`watchdog.demo.simpod.SimPod`) there on the pod's container port ``http``, and patches
  ``pods/status`` to Running/Ready with ``podIP``/``podIPs`` = that address. The engine's initial mode comes
  from the pod annotation ``sim.vllm-watchdog.io/mode`` (default ``progressing``);
- readiness gates, as the kubelet's status manager does: a pod that declares ``spec.readinessGates`` is Ready only
  while every gate's condition is True (re-evaluated every sync, as the conditions change); such a pod also gets a
  second pod IP, the ULA ``fd00:10::N`` (``podIPs[1]``), never used for traffic: an IPv6 headless Service's
  EndpointSlices can hold it where the loopback address is refused, so endpoints follow Ready for real;
- finishes graceful deletions as a kubelet does: once a pod has a ``deletionTimestamp`` its engine is stopped
  (the container got SIGTERM), and when the grace period is over (the ``deletionTimestamp``) the pod is DELETEd
  with ``gracePeriodSeconds: 0`` and ``preconditions.uid``. Until then the pod stays Terminating.

Only loopback addresses are ever used for traffic.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from watchdog.demo.controlplane.api import Api, ApiError
from watchdog.demo.simpod import SimPod

MODE_ANNOTATION = "sim.vllm-watchdog.io/mode"
HOSTNAME_LABEL = "kubernetes.io/hostname"
FIRST_ADDRESS = ipaddress.IPv4Address("127.10.0.2")
log = logging.getLogger("watchdog.demo.kubelet")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def http_port(pod: dict[str, Any]) -> int | None:
    for container in pod["spec"].get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "http":
                return int(port["containerPort"])
    return None


@dataclass
class Running:
    """A pod this kubelet started: its engine and address."""

    namespace: str
    name: str
    uid: str
    ip: str
    sim: SimPod | None
    node: str
    stopped: bool = False


class FakeKubelet:
    """Start with :meth:`start`; ``sim_for(namespace, name)`` returns the engine of a running pod."""

    def __init__(self, api: Api, nodes: tuple[str, ...] = ("node-a", "node-b"), poll_s: float = 0.2,
                 schedulable: int | None = None) -> None:
        """``schedulable``: only the first N nodes take pods without a hostname nodeSelector (the rest are
        reserved for scenarios that pin pods to them)."""
        self.api, self.nodes, self.poll_s = api, nodes, poll_s
        self.pods: dict[str, Running] = {}  # uid -> running pod
        self.deleted: list[dict[str, Any]] = []  # {"uid", "namespace", "name", "at"} finished graceful deletions
        self.errors: deque[str] = deque(maxlen=200)  # recent sync errors (for failure reports)
        self._addresses = (FIRST_ADDRESS + i for i in itertools.count() if (FIRST_ADDRESS + i).packed[3] not in
                           (0, 255))
        self._round_robin = itertools.cycle(nodes[:schedulable] if schedulable else nodes)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> FakeKubelet:
        for node in self.nodes:
            if self.api.find(f"/api/v1/nodes/{node}") is None:
                self.api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
                    "name": node, "labels": {HOSTNAME_LABEL: node, "kubernetes.io/os": "linux"}}})
            self.api.merge_patch(f"/api/v1/nodes/{node}/status", {"status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet stand-in (watchdog.demo.controlplane) is posting ready status",
                                "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}],
                "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "nodeInfo": {"kubeletVersion": "v1.35.4-fake", "architecture": "amd64", "operatingSystem": "linux",
                             "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                             "osImage": "", "containerRuntimeVersion": "fake://0", "kubeProxyVersion": ""},
            }})
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self._lock:
            for pod in self.pods.values():
                if pod.sim is not None and not pod.stopped:
                    pod.sim.stop()
                    pod.stopped = True

    # -- queries -----------------------------------------------------------------------------------------------
    def sim_for(self, namespace: str, name: str) -> SimPod:
        with self._lock:
            for pod in self.pods.values():
                if (pod.namespace, pod.name) == (namespace, name) and pod.sim is not None and not pod.stopped:
                    return pod.sim
        raise KeyError(f"no running simulated engine for pod {namespace}/{name}")

    def running(self, namespace: str) -> list[Running]:
        with self._lock:
            return [p for p in self.pods.values() if p.namespace == namespace and not p.stopped]

    # -- the loop ----------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as exc:  # keep going: the API server may be briefly unavailable
                self.errors.append(repr(exc))
                log.warning("fake kubelet sync failed: %r", exc)
            self._stop.wait(self.poll_s)

    def sync(self) -> None:
        pods = self.api.get("/api/v1/pods")["items"]
        present = set()
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            uid = meta["uid"]
            present.add(uid)
            try:
                if meta.get("deletionTimestamp"):
                    self._terminate(pod)
                elif not spec.get("nodeName"):
                    self._bind(pod)
                elif uid not in self.pods and spec["nodeName"] in self.nodes:
                    self._run(pod)
                elif uid in self.pods and spec.get("readinessGates"):
                    self._gate(pod)
            except ApiError as exc:  # one pod's trouble (e.g. an admission policy) must not stall the others
                self.errors.append(f"{meta['namespace']}/{meta['name']}: {exc}")
        with self._lock:
            gone = [uid for uid in self.pods if uid not in present]
            for uid in gone:  # removed without us (force delete): the "container" dies with it
                pod = self.pods.pop(uid)
                if pod.sim is not None and not pod.stopped:
                    pod.sim.stop()

    def _bind(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        node = (pod["spec"].get("nodeSelector") or {}).get(HOSTNAME_LABEL) or next(self._round_robin)
        if node not in self.nodes:
            return  # unschedulable here; stays Pending
        try:
            self.api.create(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding", {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"], "uid": meta["uid"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    def _run(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        port = http_port(pod)
        ip = str(next(self._addresses))
        sim = None
        if port is not None:
            mode = (meta.get("annotations") or {}).get(MODE_ANNOTATION, "progressing")
            sim = SimPod(ip, port, mode)
            sim.start()
        running = Running(meta["namespace"], meta["name"], meta["uid"], ip, sim, pod["spec"]["nodeName"])
        with self._lock:
            self.pods[meta["uid"]] = running
        now = _now()
        containers = pod["spec"]["containers"]
        gated = bool(pod["spec"].get("readinessGates"))
        low = int(ipaddress.IPv4Address(ip)) & 0xFFFF
        ips = [{"ip": ip}, {"ip": f"fd00:10::{low:x}"}]  # the ULA one only ever appears in EndpointSlices
        status = {
            "phase": "Running", "podIP": ip, "podIPs": ips if gated else ips[:1], "startTime": now,
            "conditions": [
                {"type": t, "status": "False" if t == "Ready" and gated else "True", "lastTransitionTime": now}
                for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled")],
            "containerStatuses": [{
                "name": c["name"], "image": c["image"], "imageID": "", "containerID": f"fake://{meta['uid'][:8]}",
                "ready": True, "started": True, "restartCount": 0, "state": {"running": {"startedAt": now}},
            } for c in containers],
        }
        try:
            self.api.request("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                             {"metadata": {"uid": meta["uid"]}, "status": status},
                             content_type="application/strategic-merge-patch+json")
        except ApiError as exc:
            if exc.status in (404, 409):  # deleted meanwhile
                return
            raise

    def _gate(self, pod: dict[str, Any]) -> None:
        """Ready = containers ready and every readiness gate's condition True (the kubelet's rule)."""
        meta, status = pod["metadata"], pod.get("status") or {}
        conditions = {c["type"]: c.get("status") for c in status.get("conditions") or []}
        gates = [g.get("conditionType") for g in pod["spec"].get("readinessGates") or []]
        ready = "True" if conditions.get("ContainersReady") == "True" and all(
            conditions.get(g) == "True" for g in gates) else "False"
        if conditions.get("Ready") == ready:
            return
        try:
            self.api.request("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                             {"metadata": {"uid": meta["uid"]}, "status": {"conditions": [
                                 {"type": "Ready", "status": ready, "lastTransitionTime": _now()}]}},
                             content_type="application/strategic-merge-patch+json")
        except ApiError as exc:
            if exc.status not in (404, 409, 422):  # deleted or replaced meanwhile
                raise

    def _terminate(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        with self._lock:
            running = self.pods.get(uid)
            if running is not None and running.sim is not None and not running.stopped:
                running.sim.stop()  # SIGTERM: the engine stops serving
                running.stopped = True
        if time.time() < _parse(meta["deletionTimestamp"]):
            return  # still inside the grace period: the pod stays Terminating
        status, _ = self.api.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                    {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                     "preconditions": {"uid": uid}}, ok=(404, 409))
        if status < 300:
            with self._lock:
                self.pods.pop(uid, None)
                self.deleted.append({"uid": uid, "namespace": meta["namespace"], "name": meta["name"],
                                     "at": time.time()})

"""``demo --control-plane real --node real``: the demo's story on a real node.

A real one-node cluster (:mod:`.kit`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
runc, CNI, kubelet, kube-proxy) inside a network namespace this process creates and enters; the watchdog image's
OCI archive, a simulated-engine image and a pause image imported into its containerd (:mod:`.images`); the chart
installed with real ``helm install`` so that the watchdog runs as a Pod from the project's image, Ready through
the chart's probes and talking to the API server through the ``kubernetes`` Service; a Deployment of three
simulated engines (pods the kubelet runs under runc, on their own pod IPs). One engine is told to wedge; the
watchdog Pod deletes it, the kubelet sends SIGTERM (the engine drains and exits 0) and the ReplicaSet replaces it.
The story ends with real ``kubectl describe pod`` of the deleted pod (captured while it is Terminating) and a
``kubectl get pods -w``-style timeline of the engines' pods, then tears everything down (:meth:`.kit.Node.stop`).

Needs root, the binaries ``make node`` builds (the control plane's and kubelet, kube-proxy, kube-scheduler), the
watchdog image's archive (``make node`` builds it when there is none), Debian's containerd, runc and CNI
plugins, helm and kubectl; otherwise one line naming what is missing, exit 2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from watchdog.demo.controlplane import workloads as cp_workloads
from watchdog.demo.controlplane.api import Api, ApiError, tool_env, wait_for
from watchdog.demo.controlplane.locate import NotAvailable, available, binary_dir, chart_dir
from watchdog.demo.controlplane.tools import helm, kubectl
from watchdog.demo.node import images
from watchdog.demo.node.kit import NODE_NAME, Node, NodeError, unavailable
from watchdog.demo.node.workloads import chart_values, create_deployment, engine_spec, set_mode
from watchdog.demo.runner import NAMESPACE, follow, say

RELEASE = "vllm-stall-watchdog"
DEPLOYMENT = "llama"
REPLICAS = 3
GRACE_S = 15  # the engines' terminationGracePeriodSeconds
DRAIN_S = 3.0  # the engine's drain after SIGTERM: the deleted pod is Terminating this long


@dataclass
class Prerequisites:
    bin_dir: Path
    archive: Path
    stale: bool  # the archive is older than the checkout's watchdog sources
    chart: Path
    helm: str
    kubectl: str


def prerequisites(control_plane_dir: str | None) -> Prerequisites:
    """Everything the story needs, or :class:`NotAvailable` with one line naming what is missing."""
    reason = unavailable(control_plane_dir)
    if reason is not None:
        raise NotAvailable(f"--node real: {reason}")
    archive = images.watchdog_archive(fresh_only=False)
    if archive is None:
        raise NotAvailable(f"--node real: the watchdog image archive is not built (neither {images.IMAGE_ARCHIVE} "
                           f"nor {images.WATCHDOG_ARCHIVE}): run `make node`")
    return Prerequisites(binary_dir(control_plane_dir), archive, archive != images.watchdog_archive(), chart_dir(),
                         helm(), kubectl())


@dataclass
class Timeline:
    """``kubectl get pods -w``-style lines of the engines' pods, from a watch (every change as it happened)."""

    api: Api
    start: float
    lines: list[str] = field(default_factory=list)
    exit_codes: dict[str, int] = field(default_factory=dict)  # the last terminated state the kubelet reported
    stop: threading.Event = field(default_factory=threading.Event)
    _last: dict[str, str] = field(default_factory=dict)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._watch()
            except Exception:  # a watch that ends or fails is simply started again
                time.sleep(0.5)

    def _watch(self) -> None:
        with self.api.session.get(f"{self.api.base_url}/api/v1/namespaces/{NAMESPACE}/pods",
                                  params={"watch": "1", "labelSelector": f"app={DEPLOYMENT}",
                                          "timeoutSeconds": "30"}, stream=True, timeout=40) as resp:
            for raw in resp.iter_lines():
                if self.stop.is_set():
                    return
                if raw:
                    event = json.loads(raw)
                    self._add(event["type"], event["object"])

    def _add(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        ready = sum(1 for c in statuses if c.get("ready"))
        restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
        for c in statuses:
            if "terminated" in (c.get("state") or {}):
                self.exit_codes[name] = int(c["state"]["terminated"].get("exitCode", -1))
        row = f"{name:<28} {ready}/1   {_status(kind, pod):<18} {restarts}"
        if self._last.get(name) == row:
            return
        self._last[name] = row
        self.lines.append(f"[{time.monotonic() - self.start:6.1f}s] {row}")


def _status(kind: str, pod: dict[str, Any]) -> str:
    """The STATUS column as kubectl prints it (the common cases)."""
    if kind == "DELETED":
        return "(deleted)"
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        state = c.get("state") or {}
        if "waiting" in state:
            return str(state["waiting"].get("reason") or "Waiting")
        if "terminated" in state:
            return str(state["terminated"].get("reason") or "Terminated")
    if status.get("phase") == "Pending":
        return "ContainerCreating" if pod["spec"].get("nodeName") else "Pending"
    return str(status.get("phase") or "Unknown")


def run_node_demo(args: argparse.Namespace) -> int:
    """The ``demo --control-plane real --node real`` verb: 0 pass, 1 fail, 2 a prerequisite is missing."""
    pre = available(prerequisites, args.control_plane_dir)
    if pre is None:
        return 2
    start = time.monotonic()
    code, stopping = 1, 0.0
    with tempfile.TemporaryDirectory(prefix="vllm-watchdog-node-demo-", ignore_cleanup_errors=True) as tmp:
        node = Node(pre.bin_dir, Path(tmp) / "node")
        timeline: Timeline | None = None
        try:
            timeline = _bring_up(node, pre, Path(tmp), start)
            code = _story(node, pre, timeline, args, start)
        except (NodeError, ApiError, AssertionError, OSError, subprocess.SubprocessError) as exc:
            print(f"\nFAIL: {exc}", flush=True)
        finally:
            if timeline is not None:
                timeline.stop.set()
            stopping = time.monotonic()
            node.stop()
    steps = ", ".join(f"{k[5:-2].replace('_', ' ').strip()} {v:.1f} s" for k, v in node.timings.items()
                      if k.startswith("stop_") and v >= 0.5)
    say(start, f"torn down in {time.monotonic() - stopping:.1f} s ({steps}): pods, processes, mounts, cgroups, the "
               f"network namespace {node.netns} and the work directory")
    return code


def _kubectl(node: Node, pre: Prerequisites, *args: str) -> str:
    done = subprocess.run([pre.kubectl, "--kubeconfig", str(node.admin_kubeconfig), *args], capture_output=True,
                          text=True, timeout=60, env=tool_env())
    return done.stdout + done.stderr


def _bring_up(node: Node, pre: Prerequisites, work: Path, start: float) -> Timeline:
    node.start()
    say(start, f"network namespace {node.netns} (bridge cni0 10.244.0.1/24, nothing routed out); etcd, "
               f"kube-apiserver, kube-controller-manager, kube-scheduler and containerd started in "
               f"{node.timings['node_start_s']:.1f} s")
    t0 = time.monotonic()
    node_images = [images.pause_archive(work), pre.archive, images.engine_archive(pre.archive, work)]
    images.import_image(node.ctr, node_images[0])
    images.import_watchdog_image(node.ctr, node_images[1])
    images.import_image(node.ctr, node_images[2])
    say(start, f"images imported into containerd in {time.monotonic() - t0:.1f} s (no registry): "
               f"{images.WATCHDOG_IMAGE} from {pre.archive}"
               + (" (older than this checkout's watchdog/: rebuild with tests/image/oci_archive.py)"
                  if pre.stale else "") + f", {images.ENGINE_IMAGE}, {images.PAUSE_IMAGE}")
    node.start_node_agents()
    say(start, f"kubelet (cgroupfs, cgroup v1) and kube-proxy (iptables) up: Node {NODE_NAME} Ready")
    assert node.api is not None  # the watch gets a client of its own (a Session is not shared across threads)
    return Timeline(Api(node.api.base_url, node.api.token, node.api.ca_file), start)


def _install(node: Node, pre: Prerequisites, work: Path, window: float) -> None:
    env = {"WATCHDOG_WINDOW_SECONDS": f"{window:g}", "WATCHDOG_SCRAPE_INTERVAL_SECONDS": f"{min(1.0, window / 3):g}",
           "WATCHDOG_SCRAPE_DEADLINE_SECONDS": "0.8", "WATCHDOG_CONNECT_TIMEOUT_SECONDS": "0.3",
           "WATCHDOG_JITTER_SECONDS": "0", "WATCHDOG_MIN_POD_AGE_SECONDS": "0", "WATCHDOG_LOG_FORMAT": "text"}
    values = work / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values(RELEASE, env)))
    done = subprocess.run([pre.helm, "install", RELEASE, str(pre.chart), "--namespace", RELEASE,
                           "--create-namespace", "--kubeconfig", str(node.admin_kubeconfig), "-f", str(values)],
                          capture_output=True, text=True, timeout=120, env=tool_env())
    if done.returncode != 0:
        raise NodeError(f"helm install exited {done.returncode}: {done.stdout}{done.stderr}")


def _story(node: Node, pre: Prerequisites, timeline: Timeline, args: argparse.Namespace, start: float) -> int:
    assert node.api is not None
    api = node.api
    work = node.work.parent
    _install(node, pre, work, args.window)
    say(start, f"helm install {RELEASE} {pre.chart.name} -n {RELEASE} --set image.repository=vllm-stall-watchdog,"
               f"image.tag={images.VERSION},image.pullPolicy=Never")
    wd = wait_for("the watchdog Pod Ready", lambda: next(
        (p for p in api.get(f"/api/v1/namespaces/{RELEASE}/pods")["items"] if cp_workloads.is_ready(p)), None),
        timeout=120, describe=lambda: _kubectl(node, pre, "describe", "pods", "-n", RELEASE)[-3000:])
    (status,) = wd["status"]["containerStatuses"]
    say(start, f"watchdog Pod {wd['metadata']['name']} Ready through the chart's /readyz probe: image "
               f"{status['image']} ({status['imageID'][:19]}), pod IP {wd['status']['podIP']}, the API server "
               "through the kubernetes Service with its ServiceAccount token")
    follower = subprocess.Popen([pre.kubectl, "--kubeconfig", str(node.admin_kubeconfig), "logs", "-f", "-n",
                                 RELEASE, wd["metadata"]["name"]], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=tool_env())
    try:
        threading.Thread(target=follow, args=(follower.stdout, start, args.verbose), daemon=True).start()
        return _engines(node, pre, timeline, args, start)
    finally:
        follower.terminate()
        follower.wait(10)


def _engines(node: Node, pre: Prerequisites, timeline: Timeline, args: argparse.Namespace, start: float) -> int:
    assert node.api is not None
    api = node.api
    cp_workloads.create_namespace(api, NAMESPACE, {cp_workloads.NAMESPACE_LABEL: "true"})
    threading.Thread(target=timeline.run, daemon=True).start()
    create_deployment(api, NAMESPACE, DEPLOYMENT, REPLICAS, engine_spec(GRACE_S, drain_s=DRAIN_S))
    pods = cp_workloads.ready_pods(api, NAMESPACE, DEPLOYMENT, REPLICAS, timeout=120)
    say(start, f"namespace {NAMESPACE} labelled {cp_workloads.NAMESPACE_LABEL}=true; Deployment {DEPLOYMENT}: "
               f"{REPLICAS} simulated engines Ready (containers under runc, readiness probe /health):")
    for pod in pods:
        say(start, f"  pod {pod['metadata']['name']:<28} {pod['status']['podIP']}:8000 on {pod['spec']['nodeName']}")
    victim = pods[0]
    name, uid = victim["metadata"]["name"], victim["metadata"]["uid"]
    time.sleep(args.wedge_after)  # --wedge-after: a few scrapes of healthy engines first
    set_mode(victim, "wedged")
    say(start, f"pod {name}: its engine wedges now (POST /sim/mode?mode=wedged: 21 running, every counter frozen, "
               "/health still 200)")
    deadline = time.monotonic() + args.timeout
    described = ""
    while time.monotonic() < deadline:
        current = api.find(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        if current is None or current["metadata"].get("deletionTimestamp"):
            described = _kubectl(node, pre, "describe", "pod", name, "-n", NAMESPACE) if current is not None else ""
            grace = (current or {}).get("metadata", {}).get("deletionGracePeriodSeconds", "?")
            say(start, f"pod {name} is Terminating (deleted by the watchdog Pod; grace period {grace} s)")
            break
        time.sleep(0.2)
    else:
        say(start, f"no deletion of {name} within {args.timeout:g} s")
        return _verdict(node, pre, timeline, name, uid, pods, "", start)
    wait_for(f"{name} gone", lambda: api.find(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}") is None, timeout=60)
    say(start, f"pod {name} gone: the kubelet stopped its container (SIGTERM; the engine drained {DRAIN_S:g} s)")
    after = cp_workloads.ready_pods(api, NAMESPACE, DEPLOYMENT, REPLICAS, timeout=60)
    fresh = [p for p in after if p["metadata"]["uid"] not in {q["metadata"]["uid"] for q in pods}]
    if fresh:
        say(start, f"the ReplicaSet replaced it: pod {fresh[0]['metadata']['name']} {fresh[0]['status']['podIP']} "
                   "Ready")
    time.sleep(2)  # a couple more cycles: nothing else may go
    return _verdict(node, pre, timeline, name, uid, pods, described, start)


def _verdict(node: Node, pre: Prerequisites, timeline: Timeline, name: str, uid: str, pods: list[dict[str, Any]],
             described: str, start: float) -> int:
    assert node.api is not None
    api = node.api
    timeline.stop.set()
    print(f"\n$ kubectl describe pod {name} -n {NAMESPACE}   (captured while Terminating)\n"
          f"{described or '(not captured)'}", flush=True)
    last = timeline.exit_codes.get(name)
    print(f"$ kubectl get pods -n {NAMESPACE} -l app={DEPLOYMENT} -w   (from a watch, seconds since the start)\n"
          f"{'':9}{'NAME':<28} READY STATUS{'':13}RESTARTS", flush=True)
    for line in timeline.lines:
        print(line)
    print(f"\n$ kubectl get events -n {NAMESPACE} --field-selector involvedObject.name={name}\n"
          + _kubectl(node, pre, "get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={name}"))
    user = f"system:serviceaccount:{RELEASE}:{RELEASE}"
    deletes = [e for e in node.audit_events() if e.get("stage") == "ResponseComplete" and e.get("verb") == "delete"
               and (e.get("objectRef") or {}).get("resource") == "pods" and e["user"].get("username") == user]
    remaining = {p["metadata"]["uid"] for p in api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]}
    checks = [
        (len(deletes) == 1 and deletes[0]["objectRef"]["name"] == name
         and (deletes[0].get("requestObject") or {}).get("preconditions", {}).get("uid") == uid,
         f"one DELETE of {name} (UID precondition) by {user}, from the watchdog Pod (the API server's audit log)"),
        (uid not in remaining, f"{name} is gone"),
        ({p["metadata"]["uid"] for p in pods[1:]} <= remaining, "the two other engines were kept"),
        (last == 0, f"its container exited 0 after SIGTERM (exit code seen: {last})"),
        (bool(cp_workloads.watchdog_events(api, NAMESPACE, "StalledPodDeleted")), "StalledPodDeleted Events"),
        ("StalledPodDeleted" in described.partition("\nEvents:")[2], "kubectl describe shows StalledPodDeleted"),
    ]
    print("summary")
    for ok, text in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {text}")
    passed = all(ok for ok, _ in checks)
    verdict = "exactly the wedged engine was deleted by the watchdog Pod, on a real node" if passed else "see above"
    print(f"\n{'PASS' if passed else 'FAIL'}: {verdict} ({time.monotonic() - start:.1f} s)", flush=True)
    return 0 if passed else 1

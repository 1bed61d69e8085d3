"""``demo --control-plane real``: the demo's story on a real control plane.

etcd + kube-apiserver + kube-controller-manager on loopback (built by ``make control-plane``), the kubelet
stand-in, the chart installed with real ``helm install``, and four Deployments (busy, idle, long prefill, and
one whose engine wedges) whose ReplicaSets really create the pods; the stand-in binds them and serves a
simulated vLLM engine at each pod's loopback IP. The watchdog runs as a separate process authenticated as the
chart's ServiceAccount, so the chart's RBAC is what the API server enforces. The story ends with real
``kubectl describe pod`` (captured while the deleted pod is still Terminating) and ``kubectl describe
deployment`` output; :mod:`.verdict` decides the exit status.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.demo.controlplane import workloads
from watchdog.demo.controlplane.api import Api, ApiError, free_port
from watchdog.demo.controlplane.chart import Release, ToolFailed, WatchdogProcess, install_release, kubectl_out
from watchdog.demo.controlplane.kubelet import FakeKubelet
from watchdog.demo.controlplane.locate import NotAvailable, available, chart_dir, checkout, require_binaries
from watchdog.demo.controlplane.plane import ControlPlane, ControlPlaneError, which_openssl
from watchdog.demo.controlplane.tools import helm, kubectl
from watchdog.demo.controlplane.verdict import Described, Outcome, report
from watchdog.demo.runner import NAMESPACE, PODS, follow, say

RELEASE = "vllm-stall-watchdog"  # the chart's release and namespace
NODES = ("node-a", "node-b")
GRACE_S = 30  # the pods' terminationGracePeriodSeconds: the deleted pod stays Terminating this long
_MODE_SHOWN = {"wedge_after": "progressing until told to wedge"}


@dataclass
class Tools:
    bin_dir: Path
    chart: Path
    helm: str
    kubectl: str


@dataclass
class World:
    """What the story started (stopped in reverse order by :meth:`stop`)."""

    plane: ControlPlane
    kubelet: FakeKubelet | None = None
    release: Release | None = None
    watchdog: WatchdogProcess | None = None
    follower: threading.Event = field(default_factory=threading.Event)

    @property
    def api(self) -> Api:
        assert self.plane.api is not None
        return self.plane.api

    def stop(self) -> None:
        self.follower.set()
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.kubelet is not None:
            self.kubelet.stop()
        self.plane.stop()


def prerequisites(control_plane_dir: str | None) -> Tools:
    """Everything the real demo needs, or :class:`NotAvailable` with one line saying how to get it."""
    bin_dir = require_binaries(control_plane_dir)
    if which_openssl() is None:
        raise NotAvailable("openssl is not on PATH (the API server's service-account key pair is made with it)")
    return Tools(bin_dir, chart_dir(), helm(), kubectl())


def run_real_demo(args: argparse.Namespace) -> int:
    """The ``demo --control-plane real`` verb: 0 pass, 1 fail, 2 a prerequisite is missing."""
    tools = available(prerequisites, args.control_plane_dir)
    if tools is None:
        return 2
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vllm-watchdog-real-demo-") as tmp:
        world = World(ControlPlane(tools.bin_dir, Path(tmp) / "control-plane"))
        try:
            code = _story(world, tools, args, Path(tmp), start)
            if getattr(args, "shell", False):
                _shell(world, tools)
            return code
        # AssertionError: a wait_for timed out; OSError includes the HTTP client's errors
        except (ControlPlaneError, ToolFailed, ApiError, AssertionError, OSError, subprocess.SubprocessError) as exc:
            print(f"\nFAIL: {exc}", flush=True)
            if world.watchdog is not None:
                print("--- watchdog log (last 40 lines):\n" + "\n".join(world.watchdog.log().splitlines()[-40:]))
            return 1
        finally:
            world.stop()


def _story(world: World, tools: Tools, args: argparse.Namespace, work: Path, start: float) -> int:
    plane = world.plane.start()
    api = world.api
    version = api.get("/version").get("gitVersion", "?")
    say(start, f"real control plane (not an emulator): kube-apiserver {version} on {plane.base_url}, etcd and "
               f"kube-controller-manager, started in {plane.start_seconds:.1f} s from {tools.bin_dir}")
    world.kubelet = FakeKubelet(api, nodes=NODES).start()
    say(start, f"kubelet stand-in: nodes {', '.join(NODES)} Ready; it binds pods and serves a simulated vLLM "
               "engine at each pod's loopback IP")
    world.release = release = install_release(plane, tools.helm, tools.kubectl, RELEASE, RELEASE, {}, work,
                                              tools.chart)
    say(start, f"helm install {RELEASE} {tools.chart.name} -n {RELEASE} (replicaCount 0: the watchdog runs "
               f"here as ServiceAccount {release.service_account}, with the chart's ClusterRole)")
    workloads.create_namespace(api, NAMESPACE, {workloads.NAMESPACE_LABEL: "true"})
    say(start, f"namespace {NAMESPACE} labelled {workloads.NAMESPACE_LABEL}=true")
    port = free_port()  # every engine listens on it, each at its pod's own 127.10.x.y
    for name, mode in PODS:  # the wedge pod's engine starts healthy; it is told to wedge once the watchdog runs
        workloads.create_deployment(api, NAMESPACE, f"llama-{name}", 1, port,
                                    mode="progressing" if mode == "wedge_after" else mode, grace_s=GRACE_S)
    seeded = {name: workloads.ready_pods(api, NAMESPACE, f"llama-{name}", 1, timeout=60)[0] for name, _ in PODS}
    for name, mode in PODS:
        pod = seeded[name]
        say(start, f"pod {pod['metadata']['name']:<30} {pod['status']['podIP']}:{port:<6} on "
                   f"{pod['spec']['nodeName']}, mode {_MODE_SHOWN.get(mode, mode)} (created by ReplicaSet "
                   f"{pod['metadata']['ownerReferences'][0]['name']})")
    seen = {_event_key(e) for e in workloads.list_events(api, NAMESPACE)}

    settings = _timings(args.window)
    world.watchdog = wd = WatchdogProcess(plane, release, work, "watchdog", settings)
    say(start, f"starting the watchdog process as {release.user}: python -m watchdog run --config config.yaml "
               f"(the chart's ConfigMap) --kubeconfig kubeconfig (a TokenRequest token), window {args.window:g} s")
    wd.start()
    threading.Thread(target=follow, args=(_tail(wd.log_path, world.follower), start, args.verbose),
                     daemon=True).start()
    assert world.kubelet is not None
    wedged = seeded["wedge"]["metadata"]["name"]
    world.kubelet.sim_for(NAMESPACE, wedged).set_mode("wedge_after", wedge_after_s=args.wedge_after)
    say(start, f"pod {wedged}: its engine wedges in {args.wedge_after:g} s (21 running, every counter frozen, "
               "/health still 200)")

    described_pod = _wait_for_deletion(world, seeded, seen, start, args.timeout, tools.kubectl)
    replacement = _replacement(world, seeded, start)
    time.sleep(2 * float(settings["WATCHDOG_SCRAPE_INTERVAL_SECONDS"]))  # more cycles: nothing else may go
    _print_new_events(api, seen, start)
    world.follower.set()  # the timeline ends here; the summary follows
    described_deploy = _kubectl(world, tools.kubectl, "describe", "deployment", "llama-wedge", "-n", NAMESPACE)
    outcome = Outcome(seeded=seeded, replacement=replacement, described_pod=described_pod,
                      described_deployment=described_deploy, watchdog_alive=wd.alive())
    return report(world.plane, release, outcome, start)


def _shell(world: World, tools: Tools) -> None:
    """``demo --control-plane real --shell``: an interactive shell (``$SHELL``, else bash) on the running world, kubectl
    and helm on PATH as the cluster admin, the chart installed and the watchdog still running; its end ends the
    demo (everything is removed)."""
    import os
    import shutil

    assert world.watchdog is not None and world.release is not None
    wd, release = world.watchdog, world.release
    status = f"{sys.executable} -m watchdog status --url 127.0.0.1:{wd.port}"
    # this interpreter's directory first: RUNBOOK's `python -m watchdog ...` must run this checkout, not a system python
    env = {**os.environ, "KUBECONFIG": str(world.plane.admin_kubeconfig),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(Path(tools.helm).parent),
                                    str(Path(tools.kubectl).parent), os.environ.get("PATH", "")]),
           "WATCHDOG_STATUS": status, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    print("\n--- a shell on this control plane (exit to remove everything) ---\n"
          f"kubectl and helm act as the cluster admin (KUBECONFIG={env['KUBECONFIG']});\n"
          f"the chart is installed as release {release.name} in namespace {release.namespace} (helm list -A);\n"
          f"the watchdog runs as {release.user}, its log: {wd.log_path}\n"
          f"it read the chart's config file once at start, with the demo's timings ({_timings_shown(wd)}): a helm "
          "upgrade changes the ConfigMap, not this running watchdog (the chart's Deployment has replicaCount 0);\n"
          f"`python -m watchdog` here is {sys.executable} (check, replay, status --url);\n"
          f"ask it: $WATCHDOG_STATUS  ({status}); its brake: kubectl -n {release.namespace} annotate configmap "
          f"{release.fullname} vllm-watchdog.io/paused=true\n"
          "pods are served by a kubelet stand-in: kubectl logs/exec and helm test cannot work here.", flush=True)
    shell = os.environ.get("SHELL") or shutil.which("bash") or "/bin/sh"
    subprocess.run([shell], env=env, cwd=checkout(), check=False)


def _timings_shown(wd: WatchdogProcess) -> str:
    """The settings the demo's environment sets over the chart's config file (the brake's and the listen address's
    wiring aside), as `NAME=value` words."""
    wiring = ("WATCHDOG_PAUSE_CONFIG_MAP", "WATCHDOG_LISTEN_ADDRESS")
    return " ".join(f"{k}={v}" for k, v in wd.env.items() if k.startswith("WATCHDOG_") and k not in wiring)


def _timings(window: float) -> dict[str, str]:
    """The demo's short timings (the emulator demo's), as the watchdog's environment."""
    return {
        "WATCHDOG_WINDOW_SECONDS": f"{window:g}",
        "WATCHDOG_SCRAPE_INTERVAL_SECONDS": f"{min(1.0, window / 3):g}",
        "WATCHDOG_SCRAPE_DEADLINE_SECONDS": "0.8",
        "WATCHDOG_CONNECT_TIMEOUT_SECONDS": "0.3",
        "WATCHDOG_JITTER_SECONDS": "0",
        "WATCHDOG_MIN_POD_AGE_SECONDS": "0",
    }


def _wait_for_deletion(world: World, seeded: dict[str, dict[str, Any]], seen: set[str], start: float,
                       timeout: float, kubectl_bin: str) -> Described:
    """Wait until the wedged pod is Terminating (or gone) with the watchdog's Events on it and its Deployment;
    return ``kubectl describe pod`` captured at once (before the stand-in finishes the graceful deletion), or,
    if the pod is already gone, the Events about it (``kubectl get events``). No output on timeout."""
    api, wedge = world.api, seeded["wedge"]["metadata"]["name"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and world.watchdog is not None and world.watchdog.alive():
        _print_new_events(api, seen, start)
        pod = api.find(f"/api/v1/namespaces/{NAMESPACE}/pods/{wedge}")
        targets = {(e["involvedObject"]["kind"], e["involvedObject"]["name"])
                   for e in workloads.watchdog_events(api, NAMESPACE, "StalledPodDeleted")}
        if (pod is None or pod["metadata"].get("deletionTimestamp")) and \
                {("Pod", wedge), ("Deployment", "llama-wedge")} <= targets:
            if pod is not None:
                say(start, f"pod {wedge} is Terminating (grace period {GRACE_S} s); kubectl describe pod {wedge}")
                return _kubectl(world, kubectl_bin, "describe", "pod", wedge, "-n", NAMESPACE)
            return _kubectl(world, kubectl_bin, "get", "events", "-n", NAMESPACE, "--field-selector",
                            f"involvedObject.kind=Pod,involvedObject.name={wedge}")
        time.sleep(0.25)
    say(start, f"no deletion of {wedge} with its Events within {timeout:g} s")
    return Described(f"kubectl describe pod {wedge} -n {NAMESPACE}", "(not run: the pod was not deleted in time)")


def _kubectl(world: World, kubectl_bin: str, *args: str) -> Described:
    """Real kubectl as the cluster admin: the command as shown, and its output."""
    return Described("kubectl " + " ".join(args), kubectl_out(kubectl_bin, world.plane, *args, check=False))


def _replacement(world: World, seeded: dict[str, dict[str, Any]], start: float) -> dict[str, Any] | None:
    """The pod the real ReplicaSet controller created for the deleted one, once Ready (None if none came)."""
    old = seeded["wedge"]["metadata"]["uid"]
    try:
        pods = workloads.ready_pods(world.api, NAMESPACE, "llama-wedge", 1, timeout=30)
    except AssertionError:
        return None
    fresh = pods[0] if pods[0]["metadata"]["uid"] != old else None
    if fresh is not None:
        say(start, f"the ReplicaSet controller replaced it: pod {fresh['metadata']['name']} "
                   f"{fresh['status']['podIP']} Ready (its engine is healthy)")
    return fresh


def _event_key(event: dict[str, Any]) -> str:
    return str(event["metadata"].get("uid") or event["metadata"]["name"])


def _print_new_events(api: Api, seen: set[str], start: float) -> None:
    for e in workloads.list_events(api, NAMESPACE):
        if _event_key(e) not in seen:
            seen.add(_event_key(e))
            inv = e["involvedObject"]
            source = (e.get("source") or {}).get("component") or e.get("reportingComponent") or "?"
            say(start, f"Event    | {e['type']} {e['reason']} on {inv['kind']}/{inv['name']} ({source})")


def _tail(path: Path, stop: threading.Event) -> Iterator[str]:
    """The lines of a growing log file (it exists: the process was started), until ``stop`` is set."""
    with open(path, errors="replace") as handle:
        pending = ""
        while True:
            chunk = handle.readline()
            if chunk:
                pending += chunk
                if pending.endswith("\n"):
                    yield pending
                    pending = ""
            elif stop.is_set():
                return
            else:
                time.sleep(0.1)

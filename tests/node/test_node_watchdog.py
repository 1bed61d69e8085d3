"""The chart's Deployment running the project's own image on a real node, and the watchdog in it deleting a wedged
engine Pod that a real kubelet then stops (SIGTERM, grace period) and the ReplicaSet replaces."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import yaml
from conftest import SESSION

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.locate import chart_dir
from watchdog.demo.controlplane.workloads import is_ready
from watchdog.demo.node.images import WATCHDOG_IMAGE
from watchdog.demo.node.kit import GATEWAY, KUBERNETES_SERVICE_IP, POD_SUBNET

pytestmark = pytest.mark.node


def test_watchdog_pod_ready_from_the_project_image(scenario, world):
    s = scenario("pod")
    pod = s.install()
    assert pod is not None
    spec, status = pod["spec"], pod["status"]
    (container,) = spec["containers"]
    (cstatus,) = status["containerStatuses"]
    # the project's image, imported into containerd, never pulled
    assert container["image"] == "vllm-stall-watchdog:" + WATCHDOG_IMAGE.rsplit(":", 1)[1]
    assert container["imagePullPolicy"] == "Never" and cstatus["imageID"].startswith("sha256:"), cstatus
    assert cstatus["ready"] and cstatus["started"] and cstatus["restartCount"] == 0, cstatus
    assert status["podIP"].startswith(POD_SUBNET.rsplit(".", 2)[0] + "."), status["podIP"]
    # Ready through the chart's own probes and securityContext, as rendered
    values = yaml.safe_load((chart_dir() / "values.yaml").read_text())
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"] == values["containerSecurityContext"], container["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"] == values["podSecurityContext"]
    assert_never_unhealthy_once_ready(s, pod)
    # the process runs as the image's user with a read-only root, inside the container
    whoami = world.kubectl("exec", "-n", s.release, pod["metadata"]["name"], "--", "python", "-c",
                           "import os; print(os.getuid(), os.access('/', os.W_OK), os.environ["
                           "'KUBERNETES_SERVICE_HOST'])")
    assert whoami.split() == ["65532", "False", KUBERNETES_SERVICE_IP], whoami
    # in-cluster config through the kubernetes Service: the API server's audit log has the ServiceAccount's
    # requests, coming from the pod's own IP (the Service routed them to the API server at the gateway)
    requests = wait_for("the watchdog's requests in the audit log", lambda: s.audit(verb="list", resource="pods"),
                        timeout=30)
    assert {ip for r in requests for ip in r["sourceIPs"]} == {status["podIP"]}, requests[0]["sourceIPs"]
    assert requests[0]["userAgent"].startswith(("vllm-stall-watchdog", "OpenAPI-Generator", "python")), requests[0]
    # `kubectl logs deploy/<release>`: JSON decision lines
    lines = wait_for("JSON lines from the watchdog", lambda: [d for d in s.decisions()] or None, timeout=30)
    assert all(isinstance(d, dict) for d in lines) and len(lines) >= 1
    # `python -m watchdog status` through `kubectl exec`
    out = world.kubectl("exec", "-n", s.release, f"deploy/{s.release}", "--", "python", "-m", "watchdog", "status")
    assert out.strip(), out
    SESSION.setdefault("watchdog_pods", []).append(
        f"watchdog Pod {s.release}/{pod['metadata']['name']} on {pod['spec']['nodeName']} ({status['podIP']}) runs "
        f"{container['image']} ({cstatus['imageID'][:19]}), Ready through /readyz; audit: "
        f"{len(s.audit())} requests from {s.user}; API server at {GATEWAY} via {KUBERNETES_SERVICE_IP}")
    print(out)


def assert_never_unhealthy_once_ready(s, pod: dict[str, Any]) -> None:
    """No probe failed after the pod first turned Ready, and the liveness probe never failed. A readiness failure
    while the process starts is the design, not a fault (NotReady until its HTTP server is up and a cycle
    completed: the kubelet probes a container at once, and under load Python takes seconds to listen), so it may
    show as the kubelet's ``Unhealthy`` Event before the Ready transition, never after."""
    name = pod["metadata"]["name"]
    ready_at = next(c["lastTransitionTime"] for c in pod["status"]["conditions"] if c["type"] == "Ready")
    unhealthy = [e for e in s.events_on(s.release, name, "Unhealthy")]
    late = [e for e in unhealthy if not e["message"].startswith("Readiness probe")
            or (e.get("lastTimestamp") or e["eventTime"])[:19] > ready_at[:19]]
    assert late == [], (ready_at, late)


def _watch_pod(world, ns: str, name: str, seen: list[dict[str, Any]], stop: threading.Event) -> None:
    """Every version of pod ``name`` until it is DELETED (a watch, so the kubelet's last status is not missed)."""
    api = world.api
    with api.session.get(f"{api.base_url}/api/v1/namespaces/{ns}/pods",
                         params={"watch": "1", "fieldSelector": f"metadata.name={name}"}, stream=True,
                         timeout=120) as resp:
        for line in resp.iter_lines():
            if line:
                event = json.loads(line)
                seen.append({"type": event["type"], "t": time.monotonic(), "object": event["object"]})
                if event["type"] == "DELETED" or stop.is_set():
                    return


def test_wedged_engine_deleted_sigterm_within_grace_replaced(scenario, world):
    s = scenario("delete")
    ns = s.namespace("llm")
    s.deployment(ns, "engine", 3, grace_s=15)
    pods = s.ready_pods(ns, "engine", 3)
    s.install()
    victim = pods[0]
    name = victim["metadata"]["name"]
    seen: list[dict[str, Any]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_pod, args=(world, ns, name, seen, stop), daemon=True)
    watcher.start()
    s.set_mode(victim, "wedged")
    wait_for(f"{name} gone", lambda: any(e["type"] == "DELETED" for e in seen), timeout=90,
             describe=lambda: s.watchdog_log()[-3000:])
    stop.set()
    (delete,) = s.audit(verb="delete", resource="pods", namespace=ns)
    assert delete["objectRef"]["name"] == name and delete["responseStatus"]["code"] == 200
    body = delete["requestObject"]
    assert body["preconditions"]["uid"] == victim["metadata"]["uid"], body
    marked = next(e for e in seen if e["object"]["metadata"].get("deletionTimestamp"))
    assert marked["object"]["metadata"]["deletionGracePeriodSeconds"] == 15
    gone = next(e for e in seen if e["type"] == "DELETED")
    # the kubelet sent SIGTERM: the engine logged it and exited 0 (not 137: no SIGKILL) within the grace period
    final = [c for e in seen for c in e["object"]["status"].get("containerStatuses") or []
             if (c.get("state") or {}).get("terminated")]
    assert final and final[-1]["state"]["terminated"]["exitCode"] == 0, final[-1:] or seen[-1]
    assert gone["t"] - marked["t"] < 15, gone["t"] - marked["t"]
    # the replacement becomes Ready; the other two are untouched
    after = s.ready_pods(ns, "engine", 3)
    assert name not in {p["metadata"]["name"] for p in after}
    assert {p["metadata"]["uid"] for p in pods[1:]} <= {p["metadata"]["uid"] for p in after}
    described = world.kubectl("describe", "pod", "-n", ns, name, check=False) + world.kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}")
    assert "StalledPodDeleted" in described, described
    assert "Killing" in described, described  # the kubelet's own Event: "Stopping container vllm"
    decisions = [d for d in s.decisions() if name in json.dumps(d)]
    assert decisions, s.watchdog_log()[-2000:]


LEASE = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/vllm-stall-watchdog"


def test_a_bad_upgrade_leaves_the_old_watchdog_leading_and_judging(scenario, world):
    """Issue 39 item 2 on a real node: with leader election the chart rolls (RollingUpdate, maxUnavailable 0), so a
    ``helm upgrade`` (without --wait, as typed in a hurry) whose new pod cannot start leaves the old pod Ready,
    holding the Lease and deleting a wedged engine; ``helm rollback`` then ends the crash loop without restarting
    the old pod. The bad value is one no render-time check can see: ``extraArgs`` is passed through to the
    watchdog, which refuses an unknown flag at start-up (exit 2)."""
    s = scenario("upgrade", config={"leaderElection": True})
    ns = s.namespace("llm")
    s.deployment(ns, "engine", 2, grace_s=5)
    engines = s.ready_pods(ns, "engine", 2)
    old = s.install()
    assert old is not None
    old_uid, old_name = old["metadata"]["uid"], old["metadata"]["name"]
    s.helm("upgrade", s.release, str(chart_dir()), "--reuse-values", "--set-json", 'extraArgs=["--no-such-flag"]')

    def refused() -> dict[str, Any] | None:
        for p in s.watchdog_pods():
            if p["metadata"]["uid"] == old_uid:
                continue
            for c in p["status"].get("containerStatuses") or []:
                ended = (c.get("lastState") or {}).get("terminated") or (c.get("state") or {}).get("terminated")
                if ended and ended["exitCode"] == 2:
                    return p
        return None
    new = wait_for("the upgraded pod refused at start-up", refused, timeout=90,
                   describe=lambda: world.kubectl("get", "pods", "-n", s.release, "-o", "wide", check=False))
    refusal = "command line refused: unrecognized arguments: --no-such-flag"

    def said() -> str | None:  # the exited run's log: current until the kubelet restarts it, then --previous
        log = "".join(world.kubectl("logs", "-n", s.release, new["metadata"]["name"], *flag, check=False)
                      for flag in ((), ("--previous",)))
        return log if refusal in log else None
    wait_for("the refusal in the new pod's log", said, timeout=60)
    # the old pod is still there, Ready, and the leader
    kept = [p for p in s.watchdog_pods() if p["metadata"]["uid"] == old_uid]
    assert kept and is_ready(kept[0]), f"the old watchdog pod {old_name} is gone or not Ready: {kept}"
    still = kept[0]
    holder = s.api.get(LEASE.format(ns=s.release))["spec"]["holderIdentity"]
    assert holder.startswith(old_name), holder
    # ... and judging: it deletes an engine wedged after the upgrade, from its own pod IP
    victim = engines[0]
    s.set_mode(victim, "wedged")
    name = victim["metadata"]["name"]
    wait_for("the old pod deletes the wedged engine", lambda: s.events_on(ns, name, "StalledPodDeleted"), timeout=90,
             describe=lambda: s.watchdog_log()[-3000:])
    (delete,) = s.audit(verb="delete", resource="pods", namespace=ns)
    assert delete["objectRef"]["name"] == name and delete["sourceIPs"] == [still["status"]["podIP"]], delete
    assert not is_ready(s.api.get(f"/api/v1/namespaces/{s.release}/pods/{new['metadata']['name']}"))
    # rollback: the crash-looping pod goes, the old one was never restarted
    s.helm("rollback", s.release, "1", "--wait", "--timeout", "120s")
    wait_for("only the old watchdog pod left", lambda: [p["metadata"]["uid"] for p in s.watchdog_pods()]
             == [old_uid], timeout=90,
             describe=lambda: world.kubectl("get", "pods", "-n", s.release, "-o", "wide", check=False))
    (kept,) = s.watchdog_pods()
    assert is_ready(kept) and kept["status"]["containerStatuses"][0]["restartCount"] == 0, kept["status"]

"""Issue 27's fault items on a real control plane: lost, refused and frozen writes between the watchdog and the
API server, injected by a TLS proxy (:mod:`faultproxy`) the watchdog process talks to instead of the API server.
Each scenario asserts what the real API server shows (its audit log of the watchdog's ServiceAccount, pods, the
deletion ledger ConfigMap, Events) and, where a request never reached it, what the proxy saw sent.

- item 12: the leader's DELETE is applied, the leader is SIGKILLed before its answer arrives; the standby takes
  over and defers the next stall in that namespace (``namespace_budget``): the ledger held the intent, written
  before the DELETE.
- item 13: the API freezes for 20 s right after applying a DELETE (the replica steps down and re-acquires): no
  second deletion in the namespace. A ledger write refused (429) right before a DELETE: no DELETE is sent
  (``ledger``) until the ledger can be written, then exactly one.
- item 14: a DELETE answered 504 without being applied is sent again next cycle and applied once, charged once.
- the matrix: (timeout after apply, reset after apply, 5xx after apply, 5xx without apply) x (the DELETE, the
  ledger write ahead of it): exactly one DELETE each, none past the namespace budget.
"""

from __future__ import annotations

import functools
import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cluster_kit import Scenario
from faultproxy import FaultProxy, Rule

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.chart import Release, WatchdogProcess
from watchdog.demo.controlplane.kubelet import FakeKubelet
from watchdog.demo.controlplane.plane import ControlPlane, audit

pytestmark = pytest.mark.cluster

ELECTED = {"leaderElection": True}  # release wd-faults: two replicas may campaign for its Lease
LEASE = "vllm-stall-watchdog"
LEDGER = f"{LEASE}-ledger"
API_TIMEOUT = {"WATCHDOG_API_TIMEOUT_SECONDS": "2"}  # a held answer times out within a cycle or two
# The matrix runs its cells side by side in one process: no cluster-wide budget or fleet breaker in the way, so
# each cell's namespace budget (1, the default) is what holds its second stall.
SIDE_BY_SIDE = {**API_TIMEOUT, "WATCHDOG_MAX_DELETIONS": "20", "WATCHDOG_BREAKER_MIN_PODS": "100"}
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# -- fixtures -------------------------------------------------------------------------------------------------------
@pytest.fixture
def proxy(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[FaultProxy]:
    certs = control_plane.work / "certs"  # kube-apiserver --cert-dir: its self-signed serving pair
    fault_proxy = FaultProxy(control_plane.base_url, control_plane.ca_file, certs / "apiserver.crt",
                             certs / "apiserver.key").start()
    try:
        yield fault_proxy
    finally:
        fault_proxy.stop()
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            print("\n===== fault proxy: the last requests =====\n" + fault_proxy.describe(80))


@pytest.fixture
def proxied(proxy: FaultProxy, watchdogs: Callable[..., WatchdogProcess]) -> Callable[..., WatchdogProcess]:
    """``proxied(release, scenario_name, name=..., env=...)``: a watchdog process (as the release's ServiceAccount)
    whose kubeconfig names the fault proxy instead of the API server (conftest's ``watchdogs``)."""
    return functools.partial(watchdogs, server=proxy.url)


# -- helpers ----------------------------------------------------------------------------------------------------------
def pod_path(namespace: str, pod: dict[str, Any]) -> str:
    return f"^/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}$"


def ledger_path(release: Release) -> str:
    return f"^/api/v1/namespaces/{release.namespace}/configmaps(/{LEDGER})?$"  # create (POST) or update (PUT)


def wedge(kubelet: FakeKubelet, namespace: str, pod: dict[str, Any]) -> None:
    kubelet.sim_for(namespace, pod["metadata"]["name"]).set_mode("wedged")


def removed(s: Scenario, namespace: str, pod: dict[str, Any]) -> bool:
    """The pod is gone, replaced by a new one of that name, or Terminating."""
    now = s.pod(namespace, pod["metadata"]["name"])
    return now is None or now["metadata"]["uid"] != pod["metadata"]["uid"] or bool(
        now["metadata"].get("deletionTimestamp"))


def pod_deletes(plane: ControlPlane, release: Release, namespace: str) -> list[dict[str, Any]]:
    """The DELETEs of pods the API server received from the watchdog in ``namespace`` (its audit log)."""
    return audit(plane, release.user, verb="delete", resource="pods", namespace=namespace)


def deleted_names(plane: ControlPlane, release: Release, namespace: str) -> list[str]:
    return [d["objectRef"]["name"] for d in pod_deletes(plane, release, namespace)]


def ledger_uids(s: Scenario, release: Release) -> list[str]:
    stored = s.api.find(f"/api/v1/namespaces/{release.namespace}/configmaps/{LEDGER}") or {}
    return [e["uid"] for e in json.loads((stored.get("data") or {}).get("deletions") or "[]")]


def ledger_write_before_delete(plane: ControlPlane, release: Release, namespace: str, pod: dict[str, Any]) -> bool:
    """In the API server's audit log: a ledger write (create/update) holding the pod's UID, answered 2xx, before
    the first DELETE of the pod."""
    uid = pod["metadata"]["uid"]
    order = [(e["verb"], (e.get("objectRef") or {}).get("resource"), e) for e in audit(plane, release.user)]
    for verb, resource, event in order:
        if resource == "pods" and verb == "delete" and event["objectRef"].get("namespace") == namespace \
                and event["objectRef"].get("name") == pod["metadata"]["name"]:
            return False
        if resource == "configmaps" and verb in ("create", "update") and uid in json.dumps(
                event.get("requestObject") or {}) and event["responseStatus"]["code"] < 300:
            return True
    return False


def identity(proc: WatchdogProcess) -> str:
    found = re.search(r"leader election on: Lease \S+ as (\S+)", proc.log())
    assert found, proc.log()[-2000:]
    return found.group(1)


def lease_holder(s: Scenario, release: Release) -> str | None:
    lease = s.api.find(f"/apis/coordination.k8s.io/v1/namespaces/{release.namespace}/leases/{LEASE}") or {}
    return (lease.get("spec") or {}).get("holderIdentity") or None


def deletions_total(proc: WatchdogProcess) -> float:
    found = re.findall(r'^vllm_watchdog_deletions_total\{action="delete",[^}]*\} (\S+)$', proc.metrics(), re.M)
    return sum(map(float, found))  # over the LLM namespaces and targets (issue 30 item 2)


def namespace_budget_used(proc: WatchdogProcess, namespace: str) -> int:
    with _NO_PROXY.open(f"http://127.0.0.1:{proc.port}/status", timeout=5) as resp:
        status = json.loads(resp.read())
    return int(status["policy"]["budget"]["namespaces"].get(namespace, {}).get("used", 0))


def deferred(s: Scenario, namespace: str, pod: dict[str, Any], needle: str, proc: WatchdogProcess,
             timeout: float = 40) -> dict[str, Any]:
    """Wait for the pod's StalledPodDeletionDeferred Event whose message holds ``needle``; fail at once when the
    pod is removed instead."""
    name = pod["metadata"]["name"]
    found = wait_for(f"{name} deferred ({needle})", lambda: "removed" if removed(s, namespace, pod) else [
        e for e in s.events_on(namespace, "Pod", name, "StalledPodDeletionDeferred") if needle in e["message"]],
        timeout=timeout, describe=lambda: proc.log()[-3000:])
    assert found != "removed", f"{namespace}/{name} was removed instead of deferred ({needle})"
    return dict(found[0])


def two_engines(s: Scenario, suffix: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Namespace ``<scenario>-<suffix>`` (enforced) with two one-replica Deployments, alpha and beta (two owners,
    so the owner rule never decides): their Ready pods."""
    ns = s.namespace(suffix, "true")
    s.deployment(ns, "alpha", 1, grace_s=3)
    s.deployment(ns, "beta", 1, grace_s=3)
    (alpha,) = s.ready_pods(ns, "alpha", 1)
    (beta,) = s.ready_pods(ns, "beta", 1)
    return ns, alpha, beta


# -- item 12 ----------------------------------------------------------------------------------------------------------
def test_failover_right_after_an_applied_delete_keeps_the_namespace_budget(scenario, proxied, proxy, release,
                                                                           kubelet, control_plane):
    s = scenario("f12-failover")
    ns, alpha, beta = two_engines(s, "llm")
    rel = release("wd-faults", ELECTED)
    # The leader's DELETE of alpha reaches the API server (applied); its answer is held until the leader is dead.
    rule = proxy.add(Rule("DELETE", pod_path(ns, alpha), "hold", hold_s=300))
    a, b = proxied(rel, s.name, name="a"), proxied(rel, s.name, name="b")
    ids = {identity(a): a, identity(b): b}
    holder = wait_for("a Lease holder", lambda: lease_holder(s, rel), timeout=25)
    assert holder in ids
    leader, standby = ids[holder], next(p for i, p in ids.items() if i != holder)

    wedge(kubelet, ns, alpha)
    wait_for("the leader's DELETE of alpha applied (Terminating or gone), its answer held",
             lambda: rule.fired and removed(s, ns, alpha), timeout=45,
             describe=lambda: leader.log()[-3000:] + "\n" + proxy.describe())
    assert leader.proc is not None
    leader.proc.kill()  # SIGKILL: no answer seen, no Event, no Lease release
    leader.proc.wait(10)
    wedge(kubelet, ns, beta)

    wait_for("the standby holds the Lease", lambda: lease_holder(s, rel) == identity(standby), timeout=30,
             describe=lambda: standby.log()[-2000:])
    event = deferred(s, ns, beta, "namespace_budget", standby)
    assert "namespace budget used: 1 deletions" in event["message"], event["message"]
    time.sleep(2)
    assert deleted_names(control_plane, rel, ns) == [alpha["metadata"]["name"]]
    assert not removed(s, ns, beta)
    assert ledger_write_before_delete(control_plane, rel, ns, alpha), "the ledger intent was not written first"
    assert alpha["metadata"]["uid"] in ledger_uids(s, rel)
    assert "deletion budget restored from the ledger" in standby.log()
    assert "remediation deleted" not in standby.log()


# -- item 13 ----------------------------------------------------------------------------------------------------------
FREEZE_S = 20.0


def test_a_leadership_blip_right_after_a_delete_does_not_forget_it(scenario, proxied, proxy, release, kubelet,
                                                                  control_plane):
    s = scenario("f13-blip")
    ns, alpha, beta = two_engines(s, "llm")
    rel = release("wd-faults", ELECTED)
    # The API server applies the DELETE of alpha, then freezes for 20 s: the DELETE's answer, the lost answer's
    # GET, Events, the Lease renews all time out; the replica steps down (renew deadline 10 s) and re-acquires.
    rule = proxy.add(Rule("DELETE", pod_path(ns, alpha), "hold", hold_s=0, freeze_s=FREEZE_S))
    wd = proxied(rel, s.name, name="solo", env=API_TIMEOUT)
    wait_for("the replica holds the Lease", lambda: lease_holder(s, rel) == identity(wd), timeout=30,
             describe=lambda: wd.log()[-2000:])

    wedge(kubelet, ns, alpha)
    wait_for("the DELETE of alpha sent (and the API frozen)", lambda: rule.fired, timeout=45,
             describe=lambda: wd.log()[-3000:])
    wedge(kubelet, ns, beta)  # stalled across the blip: decided right when the replica leads again
    wait_for("the replica steps down", lambda: "is no longer the leader" in wd.log(), timeout=FREEZE_S + 5,
             describe=lambda: wd.log()[-3000:])
    wait_for("the replica leads again", lambda: wd.log().count("is now the leader") >= 2, timeout=FREEZE_S + 15,
             describe=lambda: wd.log()[-3000:])
    after = wd.log().rsplit("is now the leader", 1)[1]
    line = wait_for("beta deferred by the namespace budget after the blip", lambda: "removed" if removed(
        s, ns, beta) else [ln for ln in wd.log().rsplit("is now the leader", 1)[1].splitlines()
                           if f"remediation deferred: {ns}/{beta['metadata']['name']}" in ln], timeout=30,
        describe=lambda: wd.log()[-3000:])
    assert line != "removed", f"beta was removed after the blip:\n{wd.log()[-3000:]}"
    assert "namespace budget used: 1 deletions" in line[0], line[0]
    time.sleep(3)
    assert removed(s, ns, alpha)
    assert set(deleted_names(control_plane, rel, ns)) == {alpha["metadata"]["name"]}, after
    assert not removed(s, ns, beta)
    assert proxy.requests("DELETE", pod_path(ns, beta)) == []
    assert namespace_budget_used(wd, ns) == 1


def test_a_refused_ledger_write_holds_the_delete_until_it_is_written(scenario, proxied, proxy, release, kubelet,
                                                                     control_plane):
    s = scenario("f13-ledger")
    ns, alpha, _ = two_engines(s, "llm")
    rel = release()
    uid = alpha["metadata"]["uid"]
    rule = proxy.add(Rule("POST|PUT", ledger_path(rel), "status", status=429, body=uid, times=None))
    wd = proxied(rel, s.name, env=API_TIMEOUT)
    wedge(kubelet, ns, alpha)
    event = deferred(s, ns, alpha, "ledger", wd)
    assert LEDGER in event["message"], event["message"]
    wait_for("the ledger refused on three cycles", lambda: len(rule.fired) >= 3, timeout=20)
    assert proxy.requests("DELETE", pod_path(ns, alpha)) == [], "a DELETE was sent without its ledger record"
    assert pod_deletes(control_plane, rel, ns) == []
    assert not removed(s, ns, alpha)

    proxy.clear()  # the ledger can be written again
    wait_for("alpha deleted", lambda: pod_deletes(control_plane, rel, ns), timeout=20,
             describe=lambda: wd.log()[-3000:])
    time.sleep(3)
    (delete,) = pod_deletes(control_plane, rel, ns)
    assert delete["requestObject"]["preconditions"]["uid"] == uid
    assert len(proxy.requests("DELETE", pod_path(ns, alpha))) == 1
    assert ledger_uids(s, rel).count(uid) == 1
    assert ledger_write_before_delete(control_plane, rel, ns, alpha)
    assert len(s.events_on(ns, "Pod", alpha["metadata"]["name"], "StalledPodDeleted")) == 1
    assert len([e for e in s.events_on(ns, "Pod", alpha["metadata"]["name"], "StalledPodDeletionDeferred")
                if "ledger" in e["message"]]) == 1  # one per stall episode and rule


# -- item 14 ----------------------------------------------------------------------------------------------------------
def test_a_delete_swallowed_by_a_504_is_sent_again_and_charged_once(scenario, proxied, proxy, release, kubelet,
                                                                   control_plane):
    s = scenario("f14-retry")
    ns, alpha, beta = two_engines(s, "llm")
    rel = release()
    uid = alpha["metadata"]["uid"]
    proxy.add(Rule("DELETE", pod_path(ns, alpha), "status", status=504))  # not forwarded: never applied
    wd = proxied(rel, s.name, env=API_TIMEOUT)
    wedge(kubelet, ns, alpha)
    wait_for("alpha deleted on a later cycle", lambda: pod_deletes(control_plane, rel, ns), timeout=45,
             describe=lambda: wd.log()[-3000:])
    sent = proxy.requests("DELETE", pod_path(ns, alpha))
    assert [r.done for r in sent] == ["status", "forwarded"], sent
    assert all(json.loads(r.body)["preconditions"]["uid"] == uid for r in sent)  # the same UID precondition
    wait_for("the retry logged", lambda: "sent again after a lost answer" in wd.log(), timeout=10)
    wait_for("alpha Terminating or gone", lambda: removed(s, ns, alpha), timeout=10)
    wedge(kubelet, ns, beta)
    event = deferred(s, ns, beta, "namespace_budget", wd)
    assert "namespace budget used: 1 deletions" in event["message"], event["message"]
    time.sleep(2)
    (delete,) = pod_deletes(control_plane, rel, ns)
    assert delete["objectRef"]["name"] == alpha["metadata"]["name"]
    assert delete["requestObject"]["preconditions"]["uid"] == uid
    assert deletions_total(wd) == 1  # charged once (at the lost answer), not again at the retry
    assert namespace_budget_used(wd, ns) == 1
    assert ledger_uids(s, rel).count(uid) == 1
    assert len(s.events_on(ns, "Pod", alpha["metadata"]["name"], "StalledPodDeleted")) == 1


# -- the matrix -------------------------------------------------------------------------------------------------------
# cell -> (the Rule's fault, whether the API server applied the first request); one namespace per cell, all cells
# in one watchdog process.
FAULTS: dict[str, tuple[dict[str, Any], bool]] = {
    "timeout": ({"action": "hold", "hold_s": 5.0}, True),  # applied; the answer comes after the 2 s timeout
    "reset": ({"action": "drop"}, True),  # applied; the connection closed without an answer
    "after5xx": ({"action": "status_after", "status": 504}, True),  # applied; answered 504
    "no5xx": ({"action": "status", "status": 503}, False),  # never reached the API server
}


def _matrix(s: Scenario, proxy: FaultProxy, proxied: Callable[..., WatchdogProcess], release: Release,
            kubelet: FakeKubelet, plane: ControlPlane, write: str) -> None:
    cells = {name: two_engines(s, name) for name in FAULTS}
    rules = {}
    for name, (fault, _) in FAULTS.items():
        ns, alpha, _ = cells[name]
        if write == "delete":
            rules[name] = proxy.add(Rule("DELETE", pod_path(ns, alpha), **fault))
        else:  # the ledger write ahead of alpha's DELETE: the first one holding alpha's UID
            rules[name] = proxy.add(Rule("POST|PUT", ledger_path(release), body=alpha["metadata"]["uid"], **fault))
    wd = proxied(release, s.name, env=SIDE_BY_SIDE)
    for ns, alpha, _ in cells.values():
        wedge(kubelet, ns, alpha)
    for name, (ns, alpha, _) in cells.items():
        wait_for(f"{name}: alpha removed", lambda ns=ns, alpha=alpha: removed(s, ns, alpha), timeout=45,
                 describe=lambda: wd.log()[-3000:])
    for ns, _, beta in cells.values():
        wedge(kubelet, ns, beta)
    for name, (ns, _, beta) in cells.items():
        event = deferred(s, ns, beta, "namespace_budget", wd)
        assert "namespace budget used: 1 deletions" in event["message"], (name, event["message"])
    time.sleep(2)
    problems = []
    for name, (ns, alpha, beta) in cells.items():
        applied_first = FAULTS[name][1]
        uid, pod = alpha["metadata"]["uid"], alpha["metadata"]["name"]
        sent = proxy.requests("DELETE", pod_path(ns, alpha))
        got = {
            "fired": len(rules[name].fired),
            "DELETEs applied (audit)": deleted_names(plane, release, ns),
            "DELETEs sent": len(sent),
            "ledger entries": ledger_uids(s, release).count(uid),
            "StalledPodDeleted": len(s.events_on(ns, "Pod", pod, "StalledPodDeleted")),
            "beta removed": removed(s, ns, beta),
        }
        want = {
            "fired": 1,
            "DELETEs applied (audit)": [pod],
            "DELETEs sent": 2 if write == "delete" and not applied_first else 1,
            "ledger entries": 1,
            "StalledPodDeleted": 1,
            "beta removed": False,
        }
        if write == "ledger":  # the removal waited for its record: one `ledger` deferral, then one DELETE
            got["ledger deferrals"] = len([e for e in s.events_on(ns, "Pod", pod, "StalledPodDeletionDeferred")
                                           if "ledger" in e["message"]])
            want["ledger deferrals"] = 1
        if got != want:
            problems.append(f"{write} x {name}: got {got}, want {want}")
        if not ledger_write_before_delete(plane, release, ns, alpha):
            problems.append(f"{write} x {name}: no ledger record before the DELETE")
    assert not problems, "\n".join(problems)
    assert deletions_total(wd) == len(FAULTS)  # one removal charged per cell


def test_fault_matrix_on_the_delete(scenario, proxied, proxy, release, kubelet, control_plane):
    _matrix(scenario("fm-delete"), proxy, proxied, release(), kubelet, control_plane, "delete")


def test_fault_matrix_on_the_ledger_write(scenario, proxied, proxy, release, kubelet, control_plane):
    _matrix(scenario("fm-ledger"), proxy, proxied, release(), kubelet, control_plane, "ledger")

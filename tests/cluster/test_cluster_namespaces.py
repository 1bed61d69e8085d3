"""Issue 36 item 3 on a real control plane: in namespace-only mode (``watchNamespaces``) one namespace whose pods
cannot be listed -- its RoleBinding deleted by the tenant's admin, or the namespace deleted at offboarding -- is that
namespace's problem alone. The real authorizer refuses the watchdog's LIST/WATCH there (403); the other
namespace's wedged pod is still deleted, the refused namespace is reported (log, /status, metric), and /readyz does
not blame the watchdog's credentials. On main every cycle failed (``cache not synced yet ... pods in <ns>``), so the
watchdog never became ready and the other namespace's wedge stayed."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.plane import audit

pytestmark = pytest.mark.cluster

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(wd: Any, path: str) -> tuple[int, Any]:
    try:
        with _NO_PROXY.open(f"http://127.0.0.1:{wd.port}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _unreadable(wd: Any) -> dict[str, float]:
    """vllm_watchdog_namespace_unreadable by namespace, from the process's /metrics."""
    prefix = 'vllm_watchdog_namespace_unreadable{namespace="'
    return {line[len(prefix):].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in wd.metrics().splitlines() if line.startswith(prefix)}


def _terminating(s: Any, ns: str, name: str) -> Any:
    """The pod's deletionTimestamp, or "gone" once it no longer exists."""
    return (s.pod(ns, name) or {"metadata": {"deletionTimestamp": "gone"}})["metadata"].get("deletionTimestamp")


def _wedge_both(s: Any, kubelet: Any, team_a: str, team_b: str) -> tuple[dict[str, Any], dict[str, Any]]:
    for ns in (team_a, team_b):
        s.deployment(ns, "engine", 2, grace_s=15)
    a_pods, b_pods = s.ready_pods(team_a, "engine", 2), s.ready_pods(team_b, "engine", 2)
    return a_pods[0]["metadata"], b_pods[0]["metadata"]


def test_a_deleted_rolebinding_blinds_only_its_namespace(scenario, watchdogs, release, kubelet, control_plane):
    """team-b's admin deletes the chart's RoleBinding in team-b before the watchdog starts: the watchdog becomes
    ready, deletes team-a's wedged pod, leaves team-b's (unknown) alone and says so; the RoleBinding back (as helm
    upgrade would), team-b's wedge is deleted too, without a restart."""
    s = scenario("s-nsrb")
    team_a, team_b = s.namespace("team-a", "true"), s.namespace("team-b", "true")
    a_wedge, b_wedge = _wedge_both(s, kubelet, team_a, team_b)
    rel = release("wd-nsrb", None, watchNamespaces=[team_a, team_b])
    binding = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{team_b}/rolebindings/{rel.fullname}"
    saved = s.api.get(binding)
    s.api.delete(binding)
    wd = watchdogs(rel, s.name)  # ready: on main it never was (every cycle failed)
    kubelet.sim_for(team_a, a_wedge["name"]).set_mode("wedged")
    kubelet.sim_for(team_b, b_wedge["name"]).set_mode("wedged")
    wait_for(f"{team_a}/{a_wedge['name']} Terminating", lambda: _terminating(s, team_a, a_wedge["name"]),
             timeout=45, describe=lambda: wd.log()[-3000:])
    time.sleep(6)  # more than a window more: team-b's wedged pod stays (its pods are unknown)
    assert not _terminating(s, team_b, b_wedge["name"])
    assert _get(wd, "/status")[0] == 200
    doc = _get(wd, "/status")[1]
    [entry] = doc["namespaces_unreadable"]
    assert entry["namespace"] == team_b and entry["status"] == 403, entry
    assert "Forbidden" in entry["why"] and f"in {team_b}" in entry["why"]
    assert _unreadable(wd) == {team_a: 0.0, team_b: 1.0}
    exposed = wd.metrics().splitlines()  # one tenant's 403s are not the watchdog's credentials:
    assert "vllm_watchdog_api_credentials_refused 0.0" in exposed
    assert 'vllm_watchdog_api_auth_failures_total{status="403"} 0.0' in exposed
    ready, body = _get(wd, "/readyz")
    assert ready == 200 and body["ready"] is True, body
    said = [line for line in wd.log().splitlines() if f"namespace {team_b}: its pods cannot be listed" in line]
    assert len(said) == 1, said  # said once, not every cycle
    refused = {e["objectRef"].get("namespace") for e in audit(control_plane, rel.user)
               if e["responseStatus"]["code"] == 403}
    assert refused == {team_b}  # the real authorizer refused team-b's requests, nothing else

    s.api.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{team_b}/rolebindings",
                 {k: saved[k] for k in ("apiVersion", "kind", "roleRef", "subjects")}
                 | {"metadata": {"name": rel.fullname, "labels": saved["metadata"].get("labels", {})}})
    wait_for(f"{team_b}/{b_wedge['name']} Terminating", lambda: _terminating(s, team_b, b_wedge["name"]),
             timeout=60, describe=lambda: wd.log()[-3000:])
    assert _get(wd, "/status")[1]["namespaces_unreadable"] == []
    assert _unreadable(wd) == {team_a: 0.0, team_b: 0.0}
    assert "Traceback" not in wd.log() and wd.alive()


def test_a_deleted_namespace_is_dropped_and_the_others_still_judged(scenario, watchdogs, release, kubelet,
                                                                    control_plane):
    """team-b was deleted at offboarding (its Role and RoleBinding with it) and the watchdog starts (a restart, a
    rollout): it becomes ready, says once that team-b is gone, stops team-b's informers and deletes team-a's wedge;
    nothing about team-b is repeated every cycle and /readyz stays ready. team-b re-created with the opt-in label
    (no Role there yet: helm upgrade would add it): watched again, and reported as unreadable (403)."""
    s = scenario("s-nsdel")
    team_a, team_b = s.namespace("team-a", "true"), s.namespace("team-b", "true")
    s.deployment(team_a, "engine", 2, grace_s=15)
    a_wedge = s.ready_pods(team_a, "engine", 2)[0]["metadata"]
    rel = release("wd-nsdel", None, watchNamespaces=[team_a, team_b])
    s.api.delete(f"/api/v1/namespaces/{team_b}")
    wait_for(f"{team_b} gone", lambda: s.api.find(f"/api/v1/namespaces/{team_b}") is None, timeout=60)
    wd = watchdogs(rel, s.name)  # ready: on main it never was (every cycle failed on team-b's 403)
    kubelet.sim_for(team_a, a_wedge["name"]).set_mode("wedged")
    wait_for(f"{team_a}/{a_wedge['name']} Terminating", lambda: _terminating(s, team_a, a_wedge["name"]),
             timeout=45, describe=lambda: wd.log()[-3000:])
    log = wd.log()
    assert log.count(f"namespace {team_b} (watchNamespaces) is gone or not opted in any more") == 1, log[-3000:]
    assert "stopped (its namespace is no longer watched)" in log
    assert _unreadable(wd) == {team_a: 0.0}
    assert _get(wd, "/status")[1]["namespaces_unreadable"] == []
    ready, body = _get(wd, "/readyz")
    assert ready == 200 and body["ready"] is True, body
    exposed = wd.metrics().splitlines()
    assert "vllm_watchdog_api_credentials_refused 0.0" in exposed
    assert 'vllm_watchdog_api_auth_failures_total{status="403"} 0.0' in exposed
    before = wd.log().count(team_b)
    time.sleep(5)  # five more cycles: nothing more about team-b
    assert wd.log().count(team_b) == before, wd.log()[-2000:]

    s.namespace("team-b", "true")  # back, without its Role
    wait_for(f"{team_b} reported", lambda: _unreadable(wd).get(team_b) == 1.0, timeout=30,
             describe=lambda: wd.log()[-3000:])
    [entry] = _get(wd, "/status")[1]["namespaces_unreadable"]
    assert entry["namespace"] == team_b and entry["status"] == 403, entry
    assert _get(wd, "/readyz")[0] == 200
    assert "Traceback" not in wd.log() and wd.alive()

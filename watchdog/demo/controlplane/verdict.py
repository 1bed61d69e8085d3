"""The real demo's verdict, from real API state: which of the seeded pods are gone or Terminating, the
replacement the ReplicaSet controller made, the DELETE requests the API server's audit log recorded from the
chart's ServiceAccount, the watchdog's Events, and the Events section of real ``kubectl describe`` output.

PASS (exit 0) only if exactly the wedged pod was deleted (one DELETE with its UID as precondition, every other
pod kept, the replacement untouched), the watchdog's Events are exactly ``StalledPodDeleted`` on that pod and
on its Deployment, and both ``kubectl describe`` outputs show ``StalledPodDeleted`` in their Events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from watchdog.demo.controlplane import workloads
from watchdog.demo.controlplane.chart import Release
from watchdog.demo.controlplane.plane import ControlPlane, audit
from watchdog.demo.runner import NAMESPACE

REASON = "StalledPodDeleted"


@dataclass
class Described:
    """One kubectl command line as shown, and its output."""

    command: str
    output: str

    @property
    def shows_reason(self) -> bool:
        """``StalledPodDeleted`` in the Events section (``kubectl get events`` output is all Events)."""
        if " get events " in self.command:
            return REASON in self.output
        _, found, events = self.output.partition("\nEvents:")
        return bool(found) and REASON in events


@dataclass
class Outcome:
    seeded: dict[str, dict[str, Any]]  # story name (busy, idle, prefill, wedge) -> its pod when first Ready
    replacement: dict[str, Any] | None  # the wedge Deployment's new pod, if the ReplicaSet made one
    described_pod: Described
    described_deployment: Described
    watchdog_alive: bool


def _check(ok: bool, text: str) -> bool:
    print(f"  {'ok  ' if ok else 'FAIL'} {text}", flush=True)
    return ok


def _pod_state(plane: ControlPlane, pod: dict[str, Any]) -> str:
    assert plane.api is not None
    meta = pod["metadata"]
    now = plane.api.find(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
    if now is None or now["metadata"]["uid"] != meta["uid"]:
        return "deleted (gone)"
    if now["metadata"].get("deletionTimestamp"):
        return f"deleted (Terminating since {now['metadata']['deletionTimestamp']})"
    return "kept"


def report(plane: ControlPlane, release: Release, outcome: Outcome, start: float) -> int:
    """Print the summary, the kubectl describe outputs and the verdict; return the exit status."""
    assert plane.api is not None
    print("\nsummary (real API state)", flush=True)
    ok = _check(outcome.watchdog_alive, "the watchdog process ran throughout")
    for name, pod in outcome.seeded.items():
        state, expected = _pod_state(plane, pod), "deleted" if name == "wedge" else "kept"
        ok &= _check(state.startswith(expected), f"{pod['metadata']['name']:<30} {state} (expected {expected})")
    fresh = outcome.replacement
    fresh_state = _pod_state(plane, fresh) if fresh is not None else "none"
    ok &= _check(fresh_state == "kept", f"replacement from the ReplicaSet controller: "
                 f"{fresh['metadata']['name'] if fresh else 'none'} {fresh_state} (expected kept)")
    ok &= _deletes(plane, release, outcome.seeded["wedge"])
    ok &= _events(plane, outcome.seeded["wedge"])
    for described in (outcome.described_pod, outcome.described_deployment):
        print(f"\n$ {described.command}\n{described.output.rstrip()}", flush=True)
    print(flush=True)
    for described in (outcome.described_pod, outcome.described_deployment):
        ok &= _check(described.shows_reason, f"`{described.command}` shows {REASON} in its Events")
    verdict = ("exactly the wedged pod was deleted on a real control plane, with Events on the pod and its "
               "Deployment in kubectl describe") if ok else "see above"
    print(f"\n{'PASS' if ok else 'FAIL'}: {verdict} ({time.monotonic() - start:.1f} s)", flush=True)
    return 0 if ok else 1


def _deletes(plane: ControlPlane, release: Release, wedged: dict[str, Any]) -> bool:
    """The DELETEs of pods the API server's audit log recorded from the chart's ServiceAccount."""
    deletes = audit(plane, release.user, verb="delete", resource="pods", namespace=NAMESPACE)
    for d in deletes:
        body = d.get("requestObject") or {}
        print(f"  audit: DELETE pods/{d['objectRef'].get('name')} by {release.user} -> "
              f"{d['responseStatus'].get('code')}, preconditions.uid {body.get('preconditions', {}).get('uid')}, "
              f"gracePeriodSeconds {body.get('gracePeriodSeconds', 'the pod default')}")
    meta = wedged["metadata"]
    exact = [(d["objectRef"].get("name"), (d.get("requestObject") or {}).get("preconditions", {}).get("uid"),
              d["responseStatus"].get("code")) for d in deletes] == [(meta["name"], meta["uid"], 200)]
    return _check(exact, f"exactly one DELETE, of {meta['name']} with its UID as precondition")


def _events(plane: ControlPlane, wedged: dict[str, Any]) -> bool:
    """The watchdog's Events in the namespace: exactly StalledPodDeleted on the wedged pod and its Deployment."""
    assert plane.api is not None
    events = workloads.watchdog_events(plane.api, NAMESPACE)
    for e in events:
        inv = e["involvedObject"]
        print(f"  event {e['type']} {e['reason']} on {inv['kind']}/{inv['name']} (count {e.get('count', 1)}): "
              f"{e['message'][:140]}...")
    got = sorted({(e["reason"], e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events})
    want = sorted({(REASON, "Pod", wedged["metadata"]["name"]), (REASON, "Deployment", "llama-wedge")})
    return _check(got == want, f"the watchdog's Events are exactly {want}" + ("" if got == want else f", got {got}"))

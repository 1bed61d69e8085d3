"""Issue 17 on a real control plane: before deleting a wedged pod the watchdog (as the chart's ServiceAccount, with
``evidenceLogLines`` > 0 and so pods/log ``get``) writes one evidence log record, bounded, holding the episode's
signal history and the confirmation scrape's values, and the Event points to it. There is no kubelet here, so the
API server cannot serve pods/log: the record says the log is unavailable and why, and the deletion still happens."""

from __future__ import annotations

import json
import re

import pytest

from watchdog.core.evidence import HISTORY_LEN
from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.controlplane.plane import audit

pytestmark = pytest.mark.cluster
EVIDENCE_CONFIG = {"evidenceLogLines": 50, "evidenceLogBytes": 4096}


def evidence_lines(log: str) -> list[tuple[int, dict]]:
    """(line length, the evidence record) of every evidence line of a JSON watchdog log."""
    out = []
    for line in log.splitlines():
        if '"evidence"' in line:
            out.append((len(line), json.loads(line)["evidence"]))
    return out


def test_evidence_record_before_the_deletion_bounded_with_the_log_unavailable(scenario, watchdogs, release,
                                                                                kubelet, control_plane):
    s = scenario("s17-evidence")
    ns = s.namespace("llm", "true")
    s.deployment(ns, "engine", 2)
    wedged = s.ready_pods(ns, "engine", 2)[0]
    name, uid = wedged["metadata"]["name"], wedged["metadata"]["uid"]
    rel = release("wd-evidence", EVIDENCE_CONFIG)
    wd = watchdogs(rel, s.name, env={"WATCHDOG_LOG_FORMAT": "json"})
    kubelet.sim_for(ns, name).set_mode("wedged")
    wait_for(f"{ns}/{name} deleted", lambda: audit(control_plane, rel.user, verb="delete", resource="pods",
                                                    namespace=ns), timeout=45, describe=lambda: wd.log()[-3000:])

    (delete,) = audit(control_plane, rel.user, verb="delete", resource="pods", namespace=ns)
    assert delete["objectRef"]["name"] == name and delete["responseStatus"]["code"] == 200
    # The log was asked for (the RBAC allows it: not a 403), and could not be served: no kubelet.
    reads = audit(control_plane, rel.user, verb="get", resource="pods", namespace=ns)
    logs = [r for r in reads if r["objectRef"].get("subresource") == "log"]
    assert len(logs) == 1 and logs[0]["responseStatus"]["code"] not in (200, 403), logs
    # the tail asked by lines only: limitBytes would keep the OLDEST bytes of the tail (the newest are wanted)
    assert "tailLines=50" in logs[0]["requestURI"] and "limitBytes" not in logs[0]["requestURI"]

    ((size, record),) = evidence_lines(wd.log())
    assert (record["pod"], record["uid"], record["outcome"], record["dry_run"]) == (f"{ns}/{name}", uid, "delete",
                                                                                     False)
    assert record["log"].startswith("log unavailable: read log of pod "), record["log"]
    assert record["final_from"] == "confirmation" and record["final"]["running"] == 21.0, record["final"]
    assert record["verdict"]["state"] == "stalled" and record["verdict"]["running"] == 21.0
    history = record["history"]
    assert 3 <= len(history) <= HISTORY_LEN and history[-1]["state"] == "stalled", history
    assert {h["state"] for h in history} <= {"suspect", "stalled", "unknown"}
    assert all(h["running"] == 21.0 for h in history if h["state"] != "unknown")
    assert [h["age_s"] for h in history] == sorted((h["age_s"] for h in history), reverse=True)
    assert size < 16_384, size  # one bounded line
    # The Event points to it, short.
    (event,) = wait_for("StalledPodDeleted Event on the pod",  # created right after the DELETE: not raced
                        lambda: s.events_on(ns, "Pod", name, "StalledPodDeleted"), timeout=15)
    assert re.search(rf"evidence: {re.escape(record['id'])} in the watchdog log\.$", event["message"]), event
    assert record["id"] == f"{uid[:8]}-{record['id'].split('-')[-1]}"

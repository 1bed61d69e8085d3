"""Namespace-only mode (``watchNamespaces``, issue 30 item 5): the cycle lists the pods of the named namespaces
alone, one LIST each, so an opted-in namespace that is not named is never watched, scraped or acted on."""

from __future__ import annotations

from pathlib import Path

from cycle_kit import NS, Rig, make_config, remediated, states

from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import seed_deployment

ELSEWHERE = "not-named"


def test_only_the_named_namespaces_pods_are_watched_and_acted_on(emulator: EmulatorServer, tmp_path: Path) -> None:
    for namespace in (NS, ELSEWHERE):  # both opted in: the label alone would make both watched
        emulator.create_namespace(namespace, {NAMESPACE_LABEL: "true"})
    rig = Rig(emulator, make_config(tmp_path, watchNamespaces=NS))
    try:
        named = rig.deployment("wedged", rig.sim("127.0.0.2", "wedged"))
        other_sim = rig.sim("127.0.0.3", "wedged")
        other = seed_deployment(emulator, ELSEWHERE, "wedged", other_sim.address, other_sim.port)
        reports = [rig.cycle() for _ in range(3)]
        assert [r.pods for r in reports] == [1, 1, 1]
        assert states(reports[-1]) == {"wedged": "stalled"}
        assert remediated(reports[-1]) == [(f"{NS}/{named['pod']['metadata']['name']}", "deleted")]
        assert emulator.get_pod(ELSEWHERE, other["pod"]["metadata"]["name"]) is not None
        assert other_sim.scrapes == 0  # never scraped
    finally:
        rig.close()

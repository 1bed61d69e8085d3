"""Issue 36 item 4: ``check``/``replay --config FILE --target A --target B`` resolve a pod that several targets
match by the rule ``run`` uses (:func:`watchdog.core.podpolicy.resolve_target`, called by discovery too): on main
``check --target llama-405b`` said 600 s while run judged the pod by the first listed target's 120 s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import BASE

from watchdog.cli.configtarget import chosen_target
from watchdog.cli.main import main
from watchdog.config.loader import load_config
from watchdog.core.discovery import discover
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.scenario import pod_manifest

CONFIG = """\
windowSeconds: 120
targets:
  - {name: vllm, podSelector: app.kubernetes.io/name=vllm}
  - {name: fast, podSelector: app=fast, windowSeconds: 60}
  - {name: llama-405b, podSelector: app=llama-big, windowSeconds: 600}
  - {name: sg, podSelector: app=sg, profile: sglang}
"""


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    (tmp_path / "empty.prom").write_text("")  # check reads it after its notes (and finds no series: exit 1)
    return str(path)


def empty(config: str) -> str:
    return str(Path(config).parent / "empty.prom")


@pytest.mark.parametrize(("names", "judged"), [(["vllm", "llama-405b"], "llama-405b"), (["llama-405b", "vllm"],
                                                                                        "llama-405b"),
                                               (["fast", "vllm"], "vllm"), (["fast"], "fast")])
def test_check_and_replay_pick_the_target_run_judges_the_pod_by(config: str, names: list[str], judged: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    loaded = load_config(config, env={})
    matching = [(t, [pod_manifest("ml", "p", "10.0.0.1", 8000, owner=None)]) for t in loaded.targets
                if t.name in names]
    matching[0][1][0]["metadata"]["uid"] = "u1"
    for _, pods in matching[1:]:
        pods[0] = matching[0][1][0]  # the same pod, listed by each target that matches it
    ns = {"metadata": {"name": "ml", "labels": {NAMESPACE_LABEL: "true"}}}
    [watched] = discover([ns], matching, base=loaded.base_policy, require_controller=False).targets
    chosen = chosen_target(config, names, False)
    assert chosen is not None and chosen.target.name == watched.target_name == judged  # run's choice, check's
    window = loaded.policy_of(chosen.target)[0].window_s
    assert main(["check", "--config", config, *[a for n in names for a in ("--target", n)], empty(config)]) == 1
    err = capsys.readouterr().err
    assert f"note: target {judged} of {config}" in err and f"window {window:g} s" in err
    assert main(["replay", "example:seed-incident", "--config", config,
                 *[a for n in names for a in ("--target", n)]]) == 0
    out, err = capsys.readouterr()
    assert f"note: target {judged} of {config}" in err and f"(window {window:g} s)" in json.loads(
        out.splitlines()[-1])["reason"]


def test_a_single_target_says_that_other_targets_may_claim_the_pod(config: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config", config, "--target", "fast", empty(config)]) == 1
    assert ("note: a pod that other targets' podSelectors match too is judged by the one with the longest window: "
            "give each with --target") in capsys.readouterr().err


def test_targets_whose_profiles_conflict_are_one_line_exit_2(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config", config, "--target", "vllm", "--target", "sg", empty(config)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "engine profiles disagree on what progress is: not judged (unknown, targets_conflict)" in line
    assert BASE.window_s  # the settings' own global window: the config file above sets its own

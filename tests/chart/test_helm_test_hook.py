"""The chart's ``helm test`` hook (templates/tests/test-ready.yaml, issue 30 item 4), rendered with the real helm: one
Pod, annotated as a test hook, from the watchdog's own image, restricted like the Deployment, never an endpoint of the
watchdog's Service, asking /readyz through the Service's environment variables. Its rendered arguments, expanded as
the kubelet expands them, are run against a real watchdog on loopback: exit 0 when ready, exit 1 and one line naming
the source when it reads nothing. (A real ``helm test`` needs a kubelet that runs the image: the node tier.)"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import builders
import pytest
import tools
import yaml
from chart_kit import objects, one, template, validate
from served_kit import serving

from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.config.loader import load_config
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config


def hooks(rendered: str) -> list[dict[str, Any]]:
    return [o for o in objects(rendered) if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]


def hook(*args: str) -> dict[str, Any]:
    found = hooks(template(*args))
    assert len(found) == 1
    return found[0]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_one_test_pod_from_the_watchdogs_image_restricted_like_the_deployment() -> None:
    rendered = template()
    pod, deploy = hook(), one(rendered, "Deployment")
    watchdog = deploy["spec"]["template"]["spec"]
    assert pod["kind"] == "Pod" and pod["metadata"]["name"] == "vsw-vllm-stall-watchdog-test"
    assert pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation"  # its log stays
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == watchdog["securityContext"]
    [container] = spec["containers"]
    assert container["image"] == watchdog["containers"][0]["image"]
    assert container["securityContext"] == watchdog["containers"][0]["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["limits"]["memory"] == "128Mi"


def test_it_asks_readyz_through_the_services_environment_variables() -> None:
    rendered = template()
    service, args = one(rendered, "Service"), hook()["spec"]["containers"][0]["args"]
    assert hook()["spec"]["enableServiceLinks"] is True
    var = service["metadata"]["name"].upper().replace("-", "_")
    assert args == ["status", "--ready", "--url", f"$({var}_SERVICE_HOST):$({var}_SERVICE_PORT)", "--timeout", "10"]
    assert [p["port"] for p in service["spec"]["ports"]] == [8080]  # *_SERVICE_PORT is the first and only port
    other = hook("--set", "fullnameOverride=llm-ops-dog")["spec"]["containers"][0]["args"][3]
    assert other == "$(LLM_OPS_DOG_SERVICE_HOST):$(LLM_OPS_DOG_SERVICE_PORT)"


def test_it_is_never_selected_as_the_watchdog() -> None:
    """Its labels match no selector of the chart: the Service would send probes and Prometheus to it, the PDB and
    the NetworkPolicy would count or fence it as the watchdog."""
    rendered = template("--set", "networkPolicy.enabled=true", "--set", "podDisruptionBudget.enabled=true")
    labels = hook("--set", "networkPolicy.enabled=true", "--set", "podDisruptionBudget.enabled=true")[
        "metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "helm-test"
    selectors = [one(rendered, "Service")["spec"]["selector"],
                 one(rendered, "Deployment")["spec"]["selector"]["matchLabels"],
                 one(rendered, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"]]
    selectors += [o["spec"]["selector"]["matchLabels"] for o in objects(rendered) if o["kind"] == "PodDisruptionBudget"]
    assert len(selectors) >= 3 and not [s for s in selectors if matches(s, labels)]


def test_it_follows_the_image_pull_secrets_digest_and_placement() -> None:
    pod = hook("--set", "image.repository=registry.example.com/vsw", "--set", "image.digest=sha256:" + "a" * 64,
               "--set", "imagePullSecrets[0]=regcred", "--set", "nodeSelector.pool=system")
    assert pod["spec"]["containers"][0]["image"] == "registry.example.com/vsw@sha256:" + "a" * 64
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["spec"]["nodeSelector"] == {"pool": "system"}


def test_the_test_pod_passes_kubernetes_validate(tmp_path: Path) -> None:
    path = tmp_path / "test-pod.yaml"
    path.write_text(yaml.safe_dump(hook()))
    done = validate(path)
    assert done.returncode == 0, done.stdout + done.stderr


# --- the rendered arguments against a real watchdog ---------------------------------------------------------


@pytest.fixture
def served(emulator: EmulatorServer, tmp_path: Path) -> Iterator[tuple[Any, int, list[float]]]:
    """A watchdog whose one pod refuses every scrape, serving on 127.0.0.1: (watchdog, its port, its fake clock)."""
    emulator.create_namespace("llm", {NAMESPACE_LABEL: "true"})
    config = load_config(str(write_config(tmp_path / "c.yaml", **{
        **FAST_SETTINGS, "minPodAgeSeconds": 0, "scrapeDeadlineSeconds": 0.3, "connectTimeoutSeconds": 0.2})), env={})
    now = [0.0]
    wd = builders.watchdog(config, KubeClient.from_settings(KubeSettings(host=emulator.base_url)), clock=lambda: now[0])
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refusing = int(closed.getsockname()[1])
    seed_deployment(emulator, "llm", "mute", "127.0.0.2", refusing)  # every scrape refused
    with serving(wd, 15.0) as server:
        yield wd, server.server_address[1], now


def run_hook(port: int) -> subprocess.CompletedProcess[str]:
    """The test Pod's container as the kubelet runs it: $(VAR) in its args expanded from the Service's variables,
    then the image's entrypoint (python -m watchdog)."""
    env = {"VSW_VLLM_STALL_WATCHDOG_SERVICE_HOST": "127.0.0.1", "VSW_VLLM_STALL_WATCHDOG_SERVICE_PORT": str(port)}
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in hook()["spec"]["containers"][0]["args"]]
    outside = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True, text=True, timeout=60,
                          cwd=tools.REPO, env=outside)


def test_the_rendered_command_passes_when_ready_and_fails_in_one_line_when_the_source_reads_nothing(
        served: tuple[Any, int, list[float]]) -> None:
    wd, port, now = served
    done = run_hook(port)
    assert done.returncode == 1 and done.stdout == "vllm-watchdog status: not ready: no cycle has completed yet\n"
    now[0] += 15
    wd.run_cycle()
    done = run_hook(port)
    assert done.returncode == 0 and done.stdout.startswith("vllm-watchdog status: ready:"), done.stdout + done.stderr
    for _ in range(2):  # the third cycle in a row that reads no pod
        now[0] += 15
        wd.run_cycle()
    done = run_hook(port)
    assert done.returncode == 1 and done.stdout.count("\n") == 1, done.stdout + done.stderr
    assert done.stdout.startswith("vllm-watchdog status: not ready: source scrape (the pods' /metrics) has read no "
                                  "pod for 3 cycles in a row")


def test_the_runbooks_uninstall_deletes_every_hook_object() -> None:
    """Helm never removes hook objects on uninstall: RUNBOOK section 12's commands delete each one the chart
    renders for the release it names (the test Pod), or it would stay behind."""
    from chart_kit import CHART, helm

    done = helm("template", "vllm-stall-watchdog", str(CHART), "--namespace", "vllm-stall-watchdog")
    assert done.returncode == 0, done.stderr
    runbook = (tools.REPO / "RUNBOOK.md").read_text()
    section = runbook[runbook.index("## 12 Uninstall"):]
    commands = section[section.index("```sh"):section.index("```", section.index("```sh") + 5)]
    found = hooks(done.stdout)
    assert found
    for obj in found:
        assert f"{obj['kind'].lower()}/{obj['metadata']['name']}" in commands

"""Every copy-paste `kubectl`/`helm` command of RUNBOOK.md, run against the real control plane as written.

The commands are read from the runbook's ``sh`` blocks (``\\`` continuations joined) and run with bash, so
quoting, flags, resource names, field selectors and ``--set`` values are what a reader pastes. Placeholders
are filled in with real objects of this cluster (namespace ``my-llm``, a Deployment and its pod, a node, the
chart's ServiceAccount); ``# yes`` / ``# no`` comments on ``kubectl auth can-i`` lines are the expected answers.
Commands that would change the shared release or the cluster for other tests run with ``--dry-run=server``
(helm: ``--dry-run``), which the real API server validates in full. A command that needs a kubelet (logs,
exec, port-forward, debug: the kubelet stand-in has no kubelet API) is skipped by rule, and the test fails if
a runbook command matches no rule, so a new command cannot go unchecked.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from watchdog.demo.controlplane import workloads
from watchdog.demo.controlplane.api import tool_env, wait_for

pytestmark = pytest.mark.cluster

RUNBOOK = Path(__file__).resolve().parents[2] / "RUNBOOK.md"
CHECKOUT = RUNBOOK.parent
NS, DEPLOYMENT, NODE = "my-llm", "llama", "node-gpu"

NEEDS_KUBELET = re.compile(r"^kubectl(\s+-n\s+\S+)?\s+(logs|exec|port-forward|debug)\s")
# Commands that change what other tests share: validated by the API server, not applied.
DRY_RUN = [
    (re.compile(r"^helm upgrade "), " --dry-run=server"),
    (re.compile(r"^helm (rollback|uninstall) "), " --dry-run"),
    (re.compile(r"^kubectl (delete namespace|label namespace --all) "), " --dry-run=server"),
    (re.compile(r"^kubectl -n \S+ patch "), " --dry-run=server"),
]


def runbook_commands() -> list[tuple[int, str]]:
    """(line, command) of every kubectl/helm command in the runbook's sh blocks, continuations joined."""
    text = RUNBOOK.read_text()
    out = []
    for block in re.finditer(r"```(?:sh|bash)\n(.*?)```", text, re.S):
        first = text[: block.start()].count("\n") + 2
        lines = block.group(1).split("\n")
        i = 0
        while i < len(lines):
            line, number = lines[i], first + i
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            if re.match(r"\s*(kubectl|helm)\s", line):
                out.append((number, line.strip()))
            i += 1
    return out


def expected_answer(command: str) -> str | None:
    """``yes``/``no`` for an ``auth can-i`` line (``yes only with ...``: no for the default release)."""
    comment = command.partition("#")[2].strip()
    if not command.startswith("kubectl auth can-i") or not comment:
        return None
    return "yes" if comment.startswith("yes") and not comment.startswith("yes only with") else "no"


def prepare(command: str) -> str:
    """The command as run here: the comment dropped, placeholders filled, a trailing `&` dropped, dry-run
    added where the command changes shared state, the install made under its own name."""
    command = command.partition(" #")[0].strip().removesuffix("&").strip()
    command = re.sub(r"(?<![$\w])DEPLOYMENT\b", DEPLOYMENT, command)
    command = re.sub(r"(?<![$\w])NODE\b", NODE, command)
    command = command.replace("--revision 3", "--revision 1").replace(" rollback vllm-stall-watchdog 3 ",
                                                                      " rollback vllm-stall-watchdog 1 ")
    if command.startswith("helm install vllm-stall-watchdog "):  # the fixture's release has that name already
        command = command.replace("helm install vllm-stall-watchdog ", "helm install runbook-install ")
        command = command.replace("--namespace vllm-stall-watchdog", "--namespace runbook-install")
        command = command.replace(" --create-namespace", "") + " --dry-run=server"
    for pattern, flag in DRY_RUN:
        if pattern.match(command):
            command = re.sub(r"(\s*[|>].*)?$", lambda m, flag=flag: flag + (m.group(1) or ""), command, count=1)
    return command


def test_every_runbook_command_runs_against_the_real_control_plane(
        control_plane, kubelet, release, kubectl, helm, sim_port, tmp_path) -> None:
    rel = release()
    api = control_plane.api
    workloads.create_namespace(api, NS, {})
    workloads.create_namespace(api, "runbook-install", {})
    try:
        workloads.create_deployment(api, NS, DEPLOYMENT, 1, sim_port)
        pod = workloads.ready_pods(api, NS, DEPLOYMENT, 1)[0]["metadata"]["name"]
        tools = f"{Path(kubectl).parent}{os.pathsep}{Path(helm).parent}"
        env = {**tool_env(), "KUBECONFIG": str(control_plane.admin_kubeconfig), "SA": rel.user, "NS": NS,
               "POD": pod, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "HELM_NAMESPACE": ""}
        api.merge_patch(f"/api/v1/nodes/{NODE}", {"spec": {"taints": [  # the runbook finds it, then removes it
            {"key": "vllm-watchdog.io/stalled", "value": "true", "effect": "NoSchedule"}]}})
        # What a cluster with leader election and the Prometheus operator has, for the commands about them: the
        # Lease a leader holds, and the operator's CRDs (schemaless here: the chart's objects are checked by
        # kubernetes-validate in tests/chart/test_helm.py; this checks the command and the chart render together).
        api.create("/apis/coordination.k8s.io/v1/namespaces/vllm-stall-watchdog/leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "vllm-stall-watchdog"},
            "spec": {"holderIdentity": "vllm-stall-watchdog-abc12_1a2b3c", "leaseDurationSeconds": 15}})
        for kind, plural in (("PrometheusRule", "prometheusrules"), ("ServiceMonitor", "servicemonitors")):
            if api.find(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.monitoring.coreos.com"):
                continue
            api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", operator_crd(kind, plural))
        wait_for("the operator's CRDs served", lambda: all(api.find(f"/apis/monitoring.coreos.com/v1/namespaces/"
                                                                     f"{NS}/{p}") for p in ("prometheusrules",
                                                                                            "servicemonitors")))
        ran, skipped, failed = 0, [], []
        for number, original in runbook_commands():
            if NEEDS_KUBELET.match(original):
                skipped.append(number)
                continue
            command = re.sub(r"(?<![$\w])POD\b", pod, prepare(original))
            done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True,
                                  cwd=CHECKOUT if command.startswith("helm") else tmp_path, env=env, timeout=120)
            ran += 1
            answer = expected_answer(original)
            if answer is not None:
                if done.stdout.strip() != answer:
                    failed.append(f"RUNBOOK.md:{number}: expected {answer}, got {done.stdout.strip() or done.stderr}")
            elif done.returncode != 0:
                failed.append(f"RUNBOOK.md:{number}: {command}\n    exit {done.returncode}: "
                              f"{(done.stderr or done.stdout).strip()[:400]}")
        print(f"runbook commands: {ran} run against the control plane, {len(skipped)} need a kubelet "
              f"(lines {skipped})")
        assert not failed, "\n".join(failed)
        assert ran >= 40
    finally:
        for name in (NS, "runbook-install"):
            api.delete(f"/api/v1/namespaces/{name}", ok=(404, 409))
        api.delete("/apis/coordination.k8s.io/v1/namespaces/vllm-stall-watchdog/leases/vllm-stall-watchdog")
        api.merge_patch(f"/api/v1/nodes/{NODE}", {"spec": {"taints": None}})


def operator_crd(kind: str, plural: str) -> dict[str, object]:
    """A schemaless stand-in for the Prometheus operator's CRD ``kind`` (monitoring.coreos.com/v1)."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_the_command_reader_sees_continuations_and_comments() -> None:
    commands = dict(runbook_commands())
    assert all(not c.endswith("\\") for c in commands.values())
    assert any(c.startswith("helm upgrade") and "--set" in c for c in commands.values())
    assert expected_answer("kubectl auth can-i get secrets -n x --as=$SA   # no") == "no"
    assert expected_answer("kubectl auth can-i patch nodes --as=$SA  # yes only with config.nodeEscalation") == "no"
    assert prepare("helm upgrade vllm-stall-watchdog ./c -n vllm-stall-watchdog --set a=1") \
        == "helm upgrade vllm-stall-watchdog ./c -n vllm-stall-watchdog --set a=1 --dry-run=server"

"""The conveniences users of other charts (kube-state-metrics, descheduler) expect, each rendered with the real
helm: ``envFrom``, ``extraContainers`` (sidecars), ``initContainers``, ``deploymentAnnotations``,
``imagePullSecrets`` as objects or names with ``global.imagePullSecrets`` merged in, and the Kubernetes quantities of
``resources`` held by values.schema.json (a memory limit without a unit is refused at ``helm template``/``install``
time, with a message that says why). The fully adapted render passes ``helm lint --strict`` and kubernetes-validate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from chart_kit import CHART, helm, lint_and_validate, objects, one, template, template_fails

ENV_FROM = [{"secretRef": {"name": "watchdog-env"}},
            {"configMapRef": {"name": "proxy", "optional": True}, "prefix": "OPS_"}]
SIDECAR = {"name": "log-shipper", "image": "registry.example.com/shipper:1.2",
           "args": ["--from", "/var/log/watchdog"],
           "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                               "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}
INIT = {"name": "fetch-ca", "image": "registry.example.com/fetch:1.0", "command": ["/fetch", "/ca/bundle.pem"],
        "volumeMounts": [{"name": "ca", "mountPath": "/ca"}]}
CONVENIENT: dict[str, Any] = {
    "envFrom": ENV_FROM,
    "extraContainers": [SIDECAR],
    "initContainers": [INIT],
    "extraVolumes": [{"name": "ca", "emptyDir": {}}],
    "deploymentAnnotations": {"reloader.stakater.com/auto": "true", "owner": "ml-platform"},
    "imagePullSecrets": ["regcred", {"name": "mirror"}],
    "global": {"imagePullSecrets": [{"name": "org-wide"}, "regcred"]},
    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
}


def values_file(tmp_path: Path, values: dict[str, Any]) -> str:
    """The values as a file, in JSON (YAML too): strings stay quoted, so helm reads "1e3" as the string it is (an
    unquoted 1e3 in a YAML values file is a number to helm: for memory that is refused like 384)."""
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values))
    return str(path)


def pod_spec(rendered: str) -> dict[str, Any]:
    return dict(one(rendered, "Deployment")["spec"]["template"]["spec"])


@pytest.fixture(scope="module")
def convenient_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    return values_file(tmp_path_factory.mktemp("values"), CONVENIENT)


@pytest.fixture(scope="module")
def convenient(convenient_file: str) -> str:
    return template("-f", convenient_file)


# --- envFrom, sidecars, init containers -----------------------------------------------------------------


def test_env_from_reaches_the_watchdog_container_only(convenient: str) -> None:
    pod = pod_spec(convenient)
    watchdog, sidecar = pod["containers"]
    assert watchdog["envFrom"] == ENV_FROM
    assert watchdog["env"] == pod_spec(template())["containers"][0]["env"]  # the chart's own env unchanged
    assert "envFrom" not in sidecar and "envFrom" not in pod_spec(template())["containers"][0]


def test_env_from_entries_are_checked_by_the_schema() -> None:
    assert "secretRefs" in template_fails("--set-json", 'envFrom=[{"secretRefs":{"name":"x"}}]')
    assert "envFrom" in template_fails("--set-json", 'envFrom=[{"secretRef":{}}]')  # a ref needs its name


def test_extra_containers_run_beside_the_watchdog_as_written(convenient: str) -> None:
    containers = pod_spec(convenient)["containers"]
    assert [c["name"] for c in containers] == ["watchdog", "log-shipper"]
    assert containers[1] == SIDECAR
    assert [c["name"] for c in pod_spec(template())["containers"]] == ["watchdog"]


def test_init_containers_run_before_the_watchdog_as_written(convenient: str) -> None:
    assert pod_spec(convenient)["initContainers"] == [INIT]
    assert "initContainers" not in pod_spec(template())


@pytest.mark.parametrize("key", ["extraContainers", "initContainers"])
def test_a_container_without_name_or_image_is_refused(key: str) -> None:
    assert "image" in template_fails("--set-json", f'{key}=[{{"name":"x"}}]')
    assert "name" in template_fails("--set-json", f'{key}=[{{"image":"busybox"}}]')


# --- Deployment annotations -----------------------------------------------------------------------------


def test_deployment_annotations_go_on_the_deployment_not_the_pod(convenient: str) -> None:
    deployment = one(convenient, "Deployment")
    assert deployment["metadata"]["annotations"] == CONVENIENT["deploymentAnnotations"]
    pod_annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert set(pod_annotations) == {"checksum/config"}  # a change here does not roll the pod
    assert "annotations" not in one(template(), "Deployment")["metadata"]
    assert "deploymentAnnotations" in template_fails("--set", "deploymentAnnotations.replicas=3")  # a string map


# --- imagePullSecrets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "want"),
    [
        ({"imagePullSecrets": [{"name": "regcred"}]}, ["regcred"]),
        ({"imagePullSecrets": ["regcred"]}, ["regcred"]),
        ({"imagePullSecrets": ["a", {"name": "b"}, "a"]}, ["a", "b"]),
        ({"global": {"imagePullSecrets": ["org"]}}, ["org"]),
        ({"global": {"imagePullSecrets": [{"name": "org"}]}, "imagePullSecrets": ["own"]}, ["org", "own"]),
        ({"global": {"imagePullSecrets": ["both", "org"]}, "imagePullSecrets": [{"name": "both"}]},
         ["both", "org"]),
        ({"global": {"imagePullSecrets": []}, "imagePullSecrets": []}, None),
        ({"global": {"storageClass": "fast"}}, None),  # a parent chart's other globals are left alone
    ],
    ids=["objects", "names", "mixed-once", "global-only", "global-and-own", "global-dup", "none", "other-globals"],
)
def test_image_pull_secrets_in_either_form_with_the_global_ones(values: dict[str, Any], want: list[str] | None,
                                                                tmp_path: Path) -> None:
    pod = pod_spec(template("-f", values_file(tmp_path, values)))
    if want is None:
        assert "imagePullSecrets" not in pod
    else:
        assert pod["imagePullSecrets"] == [{"name": n} for n in want]


def test_the_adapted_pull_secrets_are_merged_global_first(convenient: str) -> None:
    assert pod_spec(convenient)["imagePullSecrets"] == [{"name": "org-wide"}, {"name": "regcred"},
                                                         {"name": "mirror"}]
    assert "imagePullSecrets" not in pod_spec(template())


@pytest.mark.parametrize(
    "args",
    [("--set-json", 'imagePullSecrets=[""]'), ("--set-json", 'imagePullSecrets=[{"nam":"x"}]'),
     ("--set-json", 'imagePullSecrets=["Not_A_Name"]'), ("--set-json", 'global.imagePullSecrets=[{"name":""}]'),
     ("--set-json", 'global.imagePullSecrets="regcred"')],
    ids=["empty-name", "typo-key", "not-a-secret-name", "global-empty-name", "global-not-a-list"],
)
def test_malformed_pull_secrets_are_refused(args: tuple[str, str]) -> None:
    assert "imagePullSecrets" in template_fails(*args)


# --- resources: Kubernetes quantities -------------------------------------------------------------------

# Valid in Kubernetes' quantity grammar (apimachinery resource.ParseQuantity): digits with an optional fraction,
# then a binary suffix (Ki..Ei), a decimal one (n u m "" k M G T P E) or an exponent (e3, E-3).
CPU_OK = ["100m", "0.5", ".5", "1.", "2", "1e3", "1E3", "1e-3", "500u", "1.5"]
CPU_NUMBERS_OK = [0, 1, 0.25]
# cpu: no unit needed, but a quantity: no sign (negative is invalid anyway), no space, no unknown suffix
# (K is not a decimal suffix: only k), no hex, no fractional exponent; and no byte unit or k and up, which
# Kubernetes would take (0.5Gi: about 537 million cores) but are always a typo for cores.
CPU_BAD = ["-100m", "+1", "abc", "100 m", "1K", "m", "", "1.2.3", "0x10", "1e", "1e3.5", "100mi", "1Kib", "0.5Gi",
           "512Mi", "2k", "1M"]
# memory-like: a byte unit is required (binary, decimal k and up, or a non-negative exponent).
MEMORY_OK = ["384Mi", "512Mi", "1Gi", "1.5Gi", ".5Gi", "64Ki", "1Ti", "1G", "500M", "129e6", "5e8", "1e3", "2E9"]
# A bare number is bytes (384: the issue's example), m/u/n are fractions of a byte, GB/gi are no suffixes.
MEMORY_BAD = ["384", "384m", "384u", "1GB", "1gi", "384 Mi", "Mi", "-1Gi", "1e-3", "1.5.3Gi", "1K", "0x100Mi"]


def quantity_values(resource: str, value: Any, kind: str = "limits") -> dict[str, Any]:
    return {"resources": {kind: {resource: value}}}


@pytest.mark.parametrize("value", CPU_OK + CPU_NUMBERS_OK)
def test_cpu_quantities_kubernetes_accepts_render(value: Any, tmp_path: Path) -> None:
    pod = pod_spec(template("-f", values_file(tmp_path, quantity_values("cpu", value, "requests"))))
    assert pod["containers"][0]["resources"]["requests"]["cpu"] == value


@pytest.mark.parametrize("value", MEMORY_OK)
def test_memory_sizes_with_a_unit_render(value: str, tmp_path: Path) -> None:
    pod = pod_spec(template("-f", values_file(tmp_path, quantity_values("memory", value))))
    assert pod["containers"][0]["resources"]["limits"]["memory"] == value


@pytest.mark.parametrize("value", [*CPU_BAD, -1])
def test_malformed_cpu_is_refused(value: Any, tmp_path: Path) -> None:
    err = template_fails("-f", values_file(tmp_path, quantity_values("cpu", value, "requests")))
    assert "/resources/requests/cpu" in err and "a number of cores" in err


@pytest.mark.parametrize("value", [*MEMORY_BAD, 384, 0.5])
def test_memory_without_a_byte_unit_is_refused(value: Any, tmp_path: Path) -> None:
    err = template_fails("-f", values_file(tmp_path, quantity_values("memory", value)))
    assert "/resources/limits/memory" in err and "a bare number is bytes" in err


@pytest.mark.parametrize("kind", ["requests", "limits"])
def test_a_misspelled_resource_name_is_refused_and_extended_resources_pass(kind: str, tmp_path: Path) -> None:
    """`memroy` is no resource name: the schema names it (the API server would only refuse it at install);
    cpu, memory, ephemeral-storage, hugepages-* and domain-prefixed extended resources (nvidia.com/gpu) pass."""
    err = template_fails("-f", values_file(tmp_path, quantity_values("memroy", "1Gi", kind)))
    assert f"at '/resources/{kind}': additional properties 'memroy' not allowed" in err
    good = {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi", "hugepages-2Mi": "2Mi", "nvidia.com/gpu": 1}
    pod = pod_spec(template("-f", values_file(tmp_path, {"resources": {kind: good}})))
    assert pod["containers"][0]["resources"][kind] == good


def test_the_issues_example_is_refused_by_helm_set_lint_and_install_with_its_reason() -> None:
    """`--set resources.limits.memory=384` (the issue's example): helm types it an integer, 384 bytes."""
    err = template_fails("--set", "resources.limits.memory=384")
    assert "at '/resources/limits/memory'" in err
    assert "a size string with a byte unit" in err and "384Mi" in err and "a bare number is bytes" in err
    lint = helm("lint", "--strict", str(CHART), "--set", "resources.limits.memory=384")
    assert lint.returncode != 0 and "a bare number is bytes" in lint.stdout + lint.stderr
    install = helm("install", "vsw", str(CHART), "--dry-run=client", "--set", "resources.limits.memory=384")
    assert install.returncode != 0 and "a bare number is bytes" in install.stderr
    assert "384Mi" in json.dumps(one(template("--set", "resources.limits.memory=384Mi"), "Deployment"))


def test_the_hint_text_itself_is_no_valid_value(tmp_path: Path) -> None:
    """The readable sentence in Helm's error is a never-matching schema branch, not an accepted value."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    limits = schema["properties"]["resources"]["properties"]["limits"]
    for node in limits["patternProperties"].values():
        (hint,) = [alt["const"] for alt in node["anyOf"] if "const" in alt]
        template_fails("-f", values_file(tmp_path, quantity_values("memory", hint)))
        template_fails("-f", values_file(tmp_path, quantity_values("cpu", hint)))


@pytest.mark.parametrize(
    ("resource", "value", "ok"),
    [("ephemeral-storage", "1Gi", True), ("ephemeral-storage", 1024, False), ("hugepages-2Mi", "64Mi", True),
     ("hugepages-2Mi", "64", False), ("nvidia.com/gpu", 1, True), ("nvidia.com/gpu", "1", True),
     ("nvidia.com/gpu", -1, False), ("nvidia.com/gpu", "one", False)],
)
def test_other_resources_are_quantities_too(resource: str, value: Any, ok: bool, tmp_path: Path) -> None:
    path = values_file(tmp_path, quantity_values(resource, value, "requests"))
    if ok:
        assert pod_spec(template("-f", path))["containers"][0]["resources"]["requests"][resource] == value
    else:
        assert "/resources/requests/" in template_fails("-f", path)


def test_the_defaults_pass_their_own_schema(tmp_path: Path) -> None:
    (container,) = pod_spec(template())["containers"]
    assert container["resources"] == {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "384Mi"}}


# --- all of it at once, through the real tools ----------------------------------------------------------


def test_the_convenient_chart_passes_lint_and_kubernetes_validate(convenient_file: str, convenient: str,
                                                                  tmp_path: Path) -> None:
    done = lint_and_validate(convenient_file, convenient, tmp_path / "convenient.yaml")
    assert done.stdout.count("passed for resource") == 2 * len(objects(convenient))

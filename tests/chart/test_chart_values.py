"""The chart's escape hatches and defaults that make it adaptable (extraArgs/Env/Volumes, security contexts,
probes, spreading and the PodDisruptionBudget, ServiceMonitor placement and relabelings), fractional settings
through plain ``--set``, the placeholder-image warning in NOTES.txt and Chart.yaml's metadata. Every value is
rendered with the real helm (helpers of tests/chart/chart_kit.py) and the adapted render passes kubernetes-validate.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_kit import (
    CHART,
    NAMESPACE,
    RELEASE,
    config_from,
    helm,
    lint_and_validate,
    objects,
    one,
    template,
    template_fails,
)

from watchdog.config.settings import BY_KEY, SETTINGS

LEADER = ("--set", "config.leaderElection=true")
SELECTOR = {"app.kubernetes.io/name": "vllm-stall-watchdog", "app.kubernetes.io/instance": RELEASE}

# Every kind of escape hatch at once, as an operator adapting the chart would write it.
ADAPTED: dict[str, Any] = {
    "extraArgs": ["--log-level", "debug"],
    "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"},
                 {"name": "WATCHDOG_LOG_FORMAT", "valueFrom": {"configMapKeyRef": {"name": "ops", "key": "fmt"}}}],
    "extraVolumes": [{"name": "ca", "configMap": {"name": "corporate-ca"}}],
    "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": True}],
    "podSecurityContext": {"runAsUser": 1000770000, "fsGroup": 1000770000},
    "containerSecurityContext": {"runAsUser": 1000770000, "seccompProfile": None},
    "livenessProbe": {"periodSeconds": 20, "failureThreshold": 6},
    "readinessProbe": None,
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"},
        {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"team": "ml"}}},
    ],
    "serviceMonitor": {
        "enabled": True, "namespace": "monitoring",
        "relabelings": [{"targetLabel": "cluster", "replacement": "gpu-a"}],
        "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "process_.*", "action": "drop"}],
    },
}


@pytest.fixture(scope="module")
def adapted_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("values") / "adapted.yaml"
    path.write_text(yaml.safe_dump(ADAPTED))
    return str(path)


@pytest.fixture(scope="module")
def adapted(adapted_file: str) -> str:
    return template("-f", adapted_file)


def pod_spec(rendered: str) -> dict[str, Any]:
    return dict(one(rendered, "Deployment")["spec"]["template"]["spec"])


# --- escape hatches -------------------------------------------------------------------------------------


def test_extra_args_env_and_volumes_are_appended_to_the_charts_own(adapted: str) -> None:
    pod = pod_spec(adapted)
    (container,) = pod["containers"]
    assert container["args"] == ["run", "--config", "/etc/vllm-stall-watchdog/config.yaml", "--log-level", "debug"]
    (own,) = pod_spec(template())["containers"]
    assert container["env"] == own["env"] + ADAPTED["extraEnv"]  # after the chart's own (POD_NAMESPACE, ...)
    assert [v["name"] for v in pod["volumes"]] == ["config", "tmp", "ca"]
    assert pod["volumes"][2] == ADAPTED["extraVolumes"][0]
    assert [m["name"] for m in container["volumeMounts"]] == ["config", "tmp", "ca"]
    assert container["volumeMounts"][2] == ADAPTED["extraVolumeMounts"][0]


def test_security_contexts_merge_the_operators_keys_into_the_restricted_defaults(adapted: str) -> None:
    """A UID the platform wants is added; null drops a default key; the restricted rest stays."""
    pod = pod_spec(adapted)
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
                                      "runAsUser": 1000770000, "fsGroup": 1000770000}
    assert pod["containers"][0]["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 1000770000, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def test_probes_are_values(adapted: str) -> None:
    (container,) = pod_spec(adapted)["containers"]
    assert container["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "http-metrics"},
                                          "initialDelaySeconds": 10, "periodSeconds": 20, "timeoutSeconds": 3,
                                          "failureThreshold": 6}
    assert "readinessProbe" not in container  # null turns it off
    (default,) = pod_spec(template())["containers"]
    assert default["readinessProbe"] == {"httpGet": {"path": "/readyz", "port": "http-metrics"},
                                         "periodSeconds": 10, "timeoutSeconds": 3, "failureThreshold": 3}


def test_topology_spread_constraints_get_the_release_selector_unless_they_have_one(adapted: str) -> None:
    zone, host = pod_spec(adapted)["topologySpreadConstraints"]
    assert zone == {**ADAPTED["topologySpreadConstraints"][0], "labelSelector": {"matchLabels": SELECTOR}}
    assert host == ADAPTED["topologySpreadConstraints"][1]


def test_service_monitor_namespace_and_relabelings(adapted: str) -> None:
    monitor = one(adapted, "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}  # the Service stays here
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["relabelings"] == ADAPTED["serviceMonitor"]["relabelings"]
    assert endpoint["metricRelabelings"] == ADAPTED["serviceMonitor"]["metricRelabelings"]
    default = one(template("--set", "serviceMonitor.enabled=true"), "ServiceMonitor")
    assert default["metadata"]["namespace"] == NAMESPACE
    assert not {"relabelings", "metricRelabelings"} & set(default["spec"]["endpoints"][0])


def test_the_adapted_chart_passes_lint_and_kubernetes_validate(adapted_file: str, adapted: str,
                                                               tmp_path: Path) -> None:
    done = lint_and_validate(adapted_file, adapted, tmp_path / "adapted.yaml")
    assert done.stdout.count("passed for resource") == 2 * len([o for o in objects(adapted)
                                                               if o["kind"] != "ServiceMonitor"])


@pytest.mark.parametrize(("args", "needle"), [
    (("--set-json", 'extraEnv=[{"value": "x"}]'), "name"),
    (("--set-json", 'extraVolumeMounts=[{"name": "ca"}]'), "mountPath"),
    (("--set", "extraArgs[0]=1"), "extraArgs"),
    (("--set", "podDisruptionBudget.maxUnavailable=half"), "maxUnavailable"),
    (("--set", "podDisruptionBudget.unhealthyPodEvictionPolicy=Never"), "unhealthyPodEvictionPolicy"),
    (("--set", "serviceMonitor.namespace=Not_A_Namespace"), "namespace"),
    (("--set", "serviceMonitor.relabeling[0].action=drop"), "relabeling"),
])
def test_schema_rejects_malformed_escape_hatches(args: tuple[str, str], needle: str) -> None:
    assert needle in template_fails(*args)


# --- more than one replica: spread over nodes and a PodDisruptionBudget ---------------------------------


def test_two_replicas_spread_over_nodes_and_get_a_disruption_budget() -> None:
    rendered = template("--set", "replicaCount=2", *LEADER)
    assert pod_spec(rendered)["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Honor", "labelSelector": {"matchLabels": SELECTOR}}]
    pdb = one(rendered, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow",
                           "selector": {"matchLabels": SELECTOR}}
    assert pdb["metadata"]["namespace"] == NAMESPACE
    assert one(rendered, "Deployment")["spec"]["selector"] == pdb["spec"]["selector"]


@pytest.mark.parametrize("replicas", ["0", "1"])
def test_one_replica_has_neither_budget_nor_default_spread(replicas: str) -> None:
    rendered = template("--set", f"replicaCount={replicas}")
    assert "PodDisruptionBudget" not in [o["kind"] for o in objects(rendered)]
    assert "topologySpreadConstraints" not in pod_spec(rendered)


def test_an_own_pod_anti_affinity_replaces_the_default_spread() -> None:
    affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                    "labelSelector": {"matchLabels": SELECTOR}}}]}}
    pod = pod_spec(template("--set", "replicaCount=2", *LEADER, "--set-json", f"affinity={json.dumps(affinity)}"))
    assert pod["affinity"] == affinity and "topologySpreadConstraints" not in pod


def test_budget_variants() -> None:
    two = ("--set", "replicaCount=2", *LEADER)
    spec = one(template(*two, "--set", "podDisruptionBudget.minAvailable=1",
                        "--set", "podDisruptionBudget.maxUnavailable=null",
                        "--set", "podDisruptionBudget.unhealthyPodEvictionPolicy="), "PodDisruptionBudget")["spec"]
    assert spec == {"minAvailable": 1, "selector": {"matchLabels": SELECTOR}}
    percent = one(template(*two, "--set", "podDisruptionBudget.maxUnavailable=50%"), "PodDisruptionBudget")
    assert percent["spec"]["maxUnavailable"] == "50%"
    assert "exactly one of minAvailable and maxUnavailable" in template_fails(
        *two, "--set", "podDisruptionBudget.minAvailable=1")
    off = template(*two, "--set", "podDisruptionBudget.enabled=false")
    assert "PodDisruptionBudget" not in [o["kind"] for o in objects(off)]


# --- fractional settings through plain --set ------------------------------------------------------------

FLOATS = sorted(s.key for s in SETTINGS if s.type == "float" and s.key in BY_KEY)
# A legal non-integer value per fractional setting, given the other defaults (cross-checks included).
FRACTIONS = {
    "windowSeconds": "120.5", "completionOnlyWindowSeconds": "600.5", "scrapeIntervalSeconds": "15.5",
    "scrapeDeadlineSeconds": "2.5", "connectTimeoutSeconds": "0.75", "jitterSeconds": "0.5",
    "prometheusTimeoutSeconds": "2.5", "prometheusStalenessSeconds": "45.5",
    "deletionWindowSeconds": "600.5", "breakerFraction": "0.5", "breakerCooldownSeconds": "300.5",
    "minPodAgeSeconds": "450.5", "nodeEscalationWindowSeconds": "3600.5", "apiTimeoutSeconds": "7.5",
    "quarantineAfterSeconds": "60.5", "quarantineMaxOwnerFraction": "0.25", "maxPodWindowSeconds": "1800.5",
    "maxPodPauseSeconds": "900.5",
}


def test_every_fractional_setting_is_covered() -> None:
    assert sorted(FRACTIONS) == FLOATS


def test_scrape_deadline_through_plain_set_reaches_the_watchdog(tmp_path: Path) -> None:
    """The issue's case: `--set config.scrapeDeadlineSeconds=2.5` renders and the watchdog reads 2.5."""
    config, raw = config_from(template("--set", "config.scrapeDeadlineSeconds=2.5"), tmp_path)
    assert raw["scrapeDeadlineSeconds"] == "2.5" and config.scrape_deadline_seconds == 2.5


@pytest.mark.parametrize("key", FLOATS)
def test_a_fraction_through_plain_set_is_a_number_to_the_watchdog(key: str, tmp_path: Path) -> None:
    """--set passes "2.5" as a string; the ConfigMap keeps it and the watchdog reads a number from it, as from
    an env var or a flag (the one conversion: the chart's template has no copy of which settings are numbers)."""
    config, raw = config_from(template("--set", f"config.{key}={FRACTIONS[key]}"), tmp_path)
    assert raw[key] == FRACTIONS[key]
    assert getattr(config, BY_KEY[key].name) == float(FRACTIONS[key])


@pytest.mark.parametrize("key", FLOATS)
def test_a_fraction_through_plain_set_is_held_to_the_settings_bounds(key: str) -> None:
    """The schema's bounds for decimal strings are the settings table's: just outside fails naming the key and
    the value, the edges pass the schema (values.schema.json's pattern for the key, generated from the table; a
    rule between settings may still refuse an edge with the others at their defaults, e.g. windowSeconds 1)."""
    setting = BY_KEY[key]
    assert setting.minimum is not None and setting.maximum is not None
    low, high = float(setting.minimum), float(setting.maximum)
    for value in [str(high + 0.5), f"0{high}1"] + ([str(low / 2)] if low > 0 else []):  # 0-led: still a number
        assert f"at '/config/{key}': '{value}' does not match pattern" in template_fails(
            "--set", f"config.{key}={value}")
    for value in (str(low), str(high), f"0{high}000"):
        done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--set", f"config.{key}={value}")
        assert done.returncode == 0 or ("don't meet the specifications of the schema" not in done.stderr
                                        and "templates/checks/values.yaml" in done.stderr), done.stderr


# --- NOTES.txt and Chart.yaml -----------------------------------------------------------------------------


def notes(*args: str) -> str:
    done = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("NOTES:", 1)[1]


def test_notes_warn_about_the_placeholder_image() -> None:
    default = yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]
    text = notes()
    assert f'WARNING: image.repository is "{default}", a bare name' in text
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert f"--set image.repository=REGISTRY/vllm-stall-watchdog,image.tag={app_version}" in text
    assert "WARNING" not in notes("--set", "image.repository=registry.example.com/platform/vllm-stall-watchdog")


def test_notes_ledger_command_works_before_the_first_removal() -> None:
    """The ledger ConfigMap exists only after the watchdog's first removal: the NOTES' command must not fail
    (NotFound) on a fresh install, and says it prints nothing until then."""
    text = notes()
    (command,) = [line.strip() for line in text.splitlines() if "-ledger" in line and "kubectl" in line]
    assert command == (f"kubectl -n {NAMESPACE} get configmap vllm-stall-watchdog-ledger --ignore-not-found -o "
                       "jsonpath='{.data.deletions}{\"\\n\"}'")
    assert "creates it at its first removal: until then\nthis prints nothing" in text
    assert "-ledger" not in notes("--set", "config.budgetLedger=false")


def test_notes_show_the_logs_of_every_replica() -> None:
    text = notes()
    assert (f"kubectl -n {NAMESPACE} logs -l app.kubernetes.io/instance={RELEASE},"
            "app.kubernetes.io/name=vllm-stall-watchdog --prefix --tail=-1") in text
    assert "logs deploy/" not in text


def test_chart_metadata_points_at_the_project_and_a_real_icon() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["home"] in chart["sources"] and chart["home"].startswith("https://github.com/")
    repo = chart["home"].removeprefix("https://github.com/")
    prefix = f"https://raw.githubusercontent.com/{repo}/main/"
    assert chart["icon"].startswith(prefix)
    icon = CHART.parents[1] / chart["icon"].removeprefix(prefix)
    assert icon.is_file() and icon.read_text().lstrip().startswith("<svg")


# --- helm upgrade --reuse-values from an older chart ------------------------------------------------------

# Values this chart version added. `helm upgrade --reuse-values` renders a new chart with the OLD chart's defaults
# (helm's upgrade.go: chart.Values = the old release's coalesced values), so these would all be missing.
ADDED_IN_THIS_VERSION = ("podSecurityContext", "containerSecurityContext", "extraArgs", "extraEnv", "extraVolumes",
                         "extraVolumeMounts", "livenessProbe", "readinessProbe", "topologySpreadConstraints",
                         "podDisruptionBudget")


def test_values_reused_from_an_older_chart_fail_with_a_message_instead_of_dropping_the_security_context(
        tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    values = yaml.safe_load((chart / "values.yaml").read_text())
    older = {k: v for k, v in values.items() if k not in ADDED_IN_THIS_VERSION}
    (chart / "values.yaml").write_text(yaml.safe_dump(older))
    done = helm("template", RELEASE, str(chart), "--namespace", NAMESPACE)
    assert done.returncode != 0
    assert "these values lack podDisruptionBudget" in done.stderr and "--reset-then-reuse-values" in done.stderr
    assert done.stderr.count("Error:") == 1 and "nil pointer" not in done.stderr  # this message, not another's


CUSTOM_TARGETS = {"config": {"targets": [
    {"name": "tgi", "podSelector": "app.kubernetes.io/name=tgi", "profile": "llamacpp", "port": "http",
     "metrics": {"running": "tgi_batch_current_size", "waiting": "tgi_queue_size",
                 "progress": ['tgi_batch_inference_count{method="decode"}', "tgi_request_count@completion"],
                 "engine_labels": [], "metrics_path": "/metrics"}},
    {"name": "trt", "podSelector": "app=trt", "profile": "trtllm"},
]}}


def test_the_documented_custom_profile_and_trtllm_reach_the_watchdog(tmp_path: Path) -> None:
    """docs/engines.md's TGI example and the trtllm profile, given as chart values, are what the watchdog
    reads (the schema once knew only the five legacy metric keys and three profiles)."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(CUSTOM_TARGETS))
    config, _ = config_from(template("-f", str(values)), tmp_path)
    tgi, trt = config.targets
    assert (tgi.profile, tgi.path, tgi.metrics["progress"]) == (
        "llamacpp", "/metrics", ['tgi_batch_inference_count{method="decode"}', "tgi_request_count@completion"])
    assert (trt.profile, trt.path) == ("trtllm", "/prometheus/metrics")


@pytest.mark.parametrize(("target", "needle"), [
    ({"profile": "tgi"}, "profile"),
    ({"metrics": {"progress": []}}, "progress"),
    ({"metrics": {"progess": ["x_total"]}}, "progess"),
    ({"metrics": {"engine_labels": ["bad-label"]}}, "engine_labels"),
])  # fmt: skip
def test_the_schema_refuses_bad_custom_profiles(tmp_path: Path, target: dict[str, Any], needle: str) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"config": {"targets": [{"name": "a", "podSelector": "a=b", **target}]}}))
    assert needle in template_fails("-f", str(values))

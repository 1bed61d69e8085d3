"""The Helm chart, checked with the real tools (helm lint/template, kubernetes-validate) and by asserting on the
rendered objects: RBAC exactly as specified per feature flag (action, nodeEscalation, leaderElection), none
with rbac.create=false, and the chart README's table of rules equal to what the templates grant,
PSS-restricted security context, one replica unless leader election is on, probes, the config checksum, the fail
guards, the values schema (and that it is what tests/chart/values_schema.py generates from the settings table), every
refused setting refused at render time (by the schema, or by the rules of templates/_rules.tpl in the watchdog's own
words) or, for the few left to it, by the watchdog's start-up check on the rendered ConfigMap, and that the
ConfigMap the chart renders is read by the watchdog (watchdog.config.loader.load_config) as exactly what the
values set (no drift between chart and code).

helm is found or fetched by tests/tools.py; chart_kit.py caches rendered output per argument list; the file runs in
seconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tools
import values_schema as chart_schema
import yaml
from chart_kit import (
    CHART,
    NAMESPACE,
    PRODUCTION,
    RELEASE,
    VALUES_DIR,
    assert_grants,
    config_from,
    helm,
    objects,
    one,
    rbac_grants,
    roles_by_purpose,
    template,
    template_fails,
    validate,
)

from watchdog.config.loader import ConfigError, load_config
from watchdog.config.settings import BY_KEY, BY_NAME, SETTINGS, target_to_dict
from watchdog.core.events import NODE_EVENT_NAMESPACE
from watchdog.core.model import DEFAULT_TARGETS

REPO = tools.REPO
CONFIG_DIR = "/etc/vllm-stall-watchdog"
# Settings the chart deliberately does not expose under `config:` (tests/chart/values_schema.py says why;
# pauseConfigMap: tests/chart/test_helm_brake.py).
NOT_IN_CHART = {BY_NAME[name].key for name in chart_schema.NOT_IN_CHART}
# In the chart (values and schema, default false) but never turned on by the production example: demo/tests only.
DEMO_ONLY = {"allowLoopbackPodIps"}
# Alternatives the production example cannot give together: it uses basic auth; the bearer token's pass-through
# is checked by test_the_bearer_token_alternative_passes_through.
OTHER_ALTERNATIVE = {"prometheusBearerTokenFile"}

# RBAC as (apiGroup, resource, verb, resourceName) grants; resourceName "" = any name. The ClusterRole is BASE
# plus exactly one of DELETE / EVICT (config.action) plus NODES with config.nodeEscalation (QUARANTINE, EVIDENCE
# with config.quarantine, config.evidenceLogLines > 0); the namespaced Role
# exists only with config.leaderElection and is LEASE(leaseName). Any extra, missing or wildcard grant fails.
BASE_RBAC = {
    *(("", "pods", v, "") for v in ("get", "list", "watch")),  # watch: the discovery cache
    *(("", "namespaces", v, "") for v in ("get", "list", "watch")),
    ("", "events", "create", ""),
    *(("apps", r, "get", "") for r in ("replicasets", "deployments", "statefulsets")),
}
DELETE_RBAC = {("", "pods", "delete", "")}
EVICT_RBAC = {("", "pods/eviction", "create", "")}
NODES_RBAC = {("", "nodes", "get", ""), ("", "nodes", "patch", "")}
QUARANTINE_RBAC = {("", "pods/status", "patch", "")}
EVIDENCE_RBAC = {("", "pods/log", "get", "")}


def ledger_rbac(lease: str = "vllm-stall-watchdog") -> set[tuple[str, str, str, str]]:
    """The deletion ledger's Role (config.budgetLedger, on by default): one ConfigMap, <leaseName>-ledger."""
    name = f"{lease}-ledger"
    return {("", "configmaps", "create", ""), ("", "configmaps", "get", name), ("", "configmaps", "update", name)}


def lease_rbac(lease: str = "vllm-stall-watchdog") -> set[tuple[str, str, str, str]]:
    return {("coordination.k8s.io", "leases", "create", ""), ("coordination.k8s.io", "leases", "get", lease),
            ("coordination.k8s.io", "leases", "update", lease)}


def kinds(text: str) -> list[str]:
    return sorted(o["kind"] for o in objects(text))


VALUES_FILES = sorted(VALUES_DIR.glob("*.yaml"))
VARIANTS = [pytest.param((), id="default"), *(pytest.param(("-f", str(p)), id=p.stem) for p in VALUES_FILES)]


@pytest.fixture(scope="module")
def default() -> str:
    return template()


@pytest.fixture(scope="module")
def production() -> str:
    return template("-f", str(PRODUCTION))


@pytest.fixture(scope="module")
def production_values() -> dict[str, Any]:
    return yaml.safe_load(PRODUCTION.read_text())


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


# --- the real tools -------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", VARIANTS)
def test_helm_lint_strict(values: tuple[str, ...]) -> None:
    done = helm("lint", "--strict", str(CHART), *values)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("values", VARIANTS)
def test_rendered_manifests_pass_kubernetes_validate_strict(values: tuple[str, ...], tmp_path: Path) -> None:
    rendered = template(*values)
    path = tmp_path / "rendered.yaml"
    path.write_text(rendered)
    done = validate(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ERROR" not in done.stdout
    # Every built-in object was validated against both versions; only the ServiceMonitor CRD has no schema.
    builtin = [o for o in objects(rendered) if o["kind"] != "ServiceMonitor"]
    assert done.stdout.count("passed for resource") == 2 * len(builtin)
    assert "against version 1.29" in done.stdout


def test_kubernetes_validate_really_rejects_an_unknown_field(default: str, tmp_path: Path) -> None:
    """The validator is not a no-op: a misplaced field in the rendered Deployment fails --strict."""
    deployment = one(default, "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFileSystem"] = True  # wrong case
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(deployment))
    done = validate(path)
    assert done.returncode != 0 and "readOnlyRootFileSystem" in done.stdout


# --- RBAC -----------------------------------------------------------------------------------------------


EVICT, NODES, LEADER = ("--set", "config.action=evict"), ("--set", "config.nodeEscalation=true"), (
    "--set", "config.leaderElection=true")
RBAC_CASES = [
    pytest.param((), BASE_RBAC | DELETE_RBAC, set(), id="default"),
    pytest.param(EVICT, BASE_RBAC | EVICT_RBAC, set(), id="action-evict"),
    pytest.param(NODES, BASE_RBAC | DELETE_RBAC | NODES_RBAC, set(), id="node-escalation"),
    pytest.param(LEADER, BASE_RBAC | DELETE_RBAC, lease_rbac(), id="leader-election"),
    pytest.param((*EVICT, *NODES, *LEADER), BASE_RBAC | EVICT_RBAC | NODES_RBAC, lease_rbac(), id="all-three"),
    pytest.param(("--set", "config.quarantine=true"), BASE_RBAC | DELETE_RBAC | QUARANTINE_RBAC, set(),
                 id="quarantine"),
    pytest.param(("--set", "config.quarantine=true", "--set", "config.action=quarantine"),
                 BASE_RBAC | QUARANTINE_RBAC, set(), id="action-quarantine"),
    pytest.param(("--set", "config.evidenceLogLines=200"), BASE_RBAC | DELETE_RBAC | EVIDENCE_RBAC, set(),
                 id="evidence-log"),
    pytest.param(("--set", "config.evidenceLogLines=0"), BASE_RBAC | DELETE_RBAC, set(), id="evidence-log-off"),
    # production.yaml: action evict, and one target of its own with action delete
    pytest.param(("-f", str(PRODUCTION)),
                 BASE_RBAC | EVICT_RBAC | DELETE_RBAC | NODES_RBAC | QUARANTINE_RBAC | EVIDENCE_RBAC,
                 lease_rbac("vllm-stall-watchdog-shard-a"), id="production"),
]


@pytest.mark.parametrize(("values", "cluster", "lease"), RBAC_CASES)
def test_rbac_is_exactly_the_least_privilege_set_per_feature(
    values: tuple[str, ...], cluster: set[tuple[str, str, str, str]], lease: set[tuple[str, str, str, str]]
) -> None:
    """The ClusterRole for each feature flag, the leader-election Role only when that is on, and the deletion
    ledger's Role (on by default) for its one ConfigMap."""
    rendered = template(*values)
    assert_grants(rbac_grants(one(rendered, "ClusterRole")), cluster)
    roles = roles_by_purpose(rendered)
    if str(PRODUCTION) not in values:  # production.yaml turns the ledger off (to exercise the Events read-back)
        assert_grants(rbac_grants(roles.pop("ledger"), names_allowed=True), ledger_rbac())
    roles.pop("brake")  # the run-time brake's Role, always there: tests/chart/test_helm_brake.py
    if not lease:
        assert roles == {}, "no leader-election Role without leader election"
        return
    assert_grants(rbac_grants(roles["leader-election"], names_allowed=True), lease)


def test_no_ledger_role_when_the_ledger_is_off() -> None:
    rendered = template("--set", "config.budgetLedger=false")
    assert [o["metadata"]["name"] for o in objects(rendered) if o["kind"] in ("Role", "RoleBinding")] == [
        f"{RELEASE}-vllm-stall-watchdog-brake"] * 2  # the brake's only


def test_no_pod_delete_in_evict_mode_and_no_eviction_in_delete_mode() -> None:
    """Eviction mode never falls back to delete: the API would refuse it too."""
    evict = rbac_grants(one(template(*EVICT), "ClusterRole"))
    delete = rbac_grants(one(template(), "ClusterRole"))
    assert ("", "pods", "delete", "") not in evict and ("", "pods/eviction", "create", "") in evict
    assert ("", "pods", "delete", "") in delete and ("", "pods/eviction", "create", "") not in delete


@pytest.mark.parametrize("values", VARIANTS)
def test_every_values_file_gets_the_rbac_its_flags_ask_for(values: tuple[str, ...], tmp_path: Path) -> None:
    """Each values file's flags (as the watchdog reads them) -> exactly the ClusterRole promised above."""
    config, _ = config_from(template(*values), tmp_path)
    want = BASE_RBAC | (EVICT_RBAC if "evict" in actions(config) else set())
    want |= DELETE_RBAC if "delete" in actions(config) else set()  # each target's own action, else the global
    want |= NODES_RBAC if config.node_escalation else set()
    want |= QUARANTINE_RBAC if config.quarantine else set()
    want |= EVIDENCE_RBAC if config.evidence_log_lines > 0 else set()
    assert_grants(rbac_grants(one(template(*values), "ClusterRole")), want)


def test_leader_election_role_is_bound_in_the_lease_namespace() -> None:
    rendered = template(*LEADER, "--set", "config.budgetLedger=false")
    role, binding = roles_by_purpose(rendered)["leader-election"], roles_by_purpose(rendered, "RoleBinding")[
        "leader-election"]
    account = one(rendered, "ServiceAccount")["metadata"]["name"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    # No leaderElectionNamespace in the config: the watchdog uses $POD_NAMESPACE, the namespace of this Role.
    raw = yaml.safe_load(one(rendered, "ConfigMap")["data"]["config.yaml"])
    assert raw["leaderElection"] is True and "leaderElectionNamespace" not in raw

    elsewhere = template(*LEADER, "--set", "config.leaderElectionNamespace=ops-leases",
                         "--set", "config.leaseName=watchdog-a", "--set", "config.budgetLedger=false")
    role, binding = roles_by_purpose(elsewhere)["leader-election"], roles_by_purpose(elsewhere, "RoleBinding")[
        "leader-election"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "ops-leases"
    assert binding["subjects"][0]["namespace"] == NAMESPACE  # the ServiceAccount stays in the release namespace
    assert_grants(rbac_grants(role, names_allowed=True), lease_rbac("watchdog-a"))


NAMESPACE_GRANTS = {("", "namespaces", v, "") for v in ("get", "list", "watch")}
WATCHED = ("--set", "watchNamespaces={team-a,team-b}")


@pytest.mark.parametrize(("values", "cluster", "namespaced"), [
    pytest.param(WATCHED, NAMESPACE_GRANTS, BASE_RBAC - NAMESPACE_GRANTS | DELETE_RBAC, id="default"),
    pytest.param((*WATCHED, *EVICT, "--set", "config.evidenceLogLines=20"), NAMESPACE_GRANTS,
                 BASE_RBAC - NAMESPACE_GRANTS | EVICT_RBAC | EVIDENCE_RBAC, id="evict-evidence"),
    pytest.param((*WATCHED, *NODES), NAMESPACE_GRANTS | NODES_RBAC, BASE_RBAC - NAMESPACE_GRANTS | DELETE_RBAC,
                 id="node-escalation"),
])
def test_namespace_only_mode_rbac_grants_pods_in_the_named_namespaces_alone(
    values: tuple[str, ...], cluster: set[tuple[str, str, str, str]],
    namespaced: set[tuple[str, str, str, str]], tmp_path: Path,
) -> None:
    """Issue 30 item 5 (watchNamespaces): the ClusterRole keeps the cluster-scoped reads only (namespaces; nodes
    with nodeEscalation); the rules on pods, Events and owners are a Role in each named namespace, bound to the
    ServiceAccount; the watchdog is told the same namespaces. Issue 36 item 10: the Node Event's create is a Role
    in namespace default (test_the_node_event_is_a_role_in_default_in_namespace_only_mode), never cluster-wide."""
    rendered = template(*values)
    assert_grants(rbac_grants(one(rendered, "ClusterRole")), cluster)
    named = {o["metadata"]["namespace"]: o for o in objects(rendered)
             if o["kind"] == "Role" and o["metadata"]["name"] == f"{RELEASE}-vllm-stall-watchdog"}
    assert set(named) == {"team-a", "team-b"}
    for role in named.values():
        assert_grants(rbac_grants(role), namespaced)
    bindings = {o["metadata"]["namespace"]: o for o in objects(rendered)
                if o["kind"] == "RoleBinding" and o["metadata"]["name"] == f"{RELEASE}-vllm-stall-watchdog"}
    account = one(rendered, "ServiceAccount")["metadata"]["name"]
    assert set(bindings) == {"team-a", "team-b"}
    assert all(b["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
               and b["roleRef"]["kind"] == "Role" for b in bindings.values())
    config, raw = config_from(rendered, tmp_path)
    assert raw["watchNamespaces"] == ["team-a", "team-b"] and config.namespaces_watched == ("team-a", "team-b")


@pytest.mark.parametrize(("watched", "node_events"), [
    (("team-a", "team-b"), True),
    (("team-a", "default"), False),  # default's own Role (the pods' rules) grants the Event's create already
])
def test_the_node_event_is_a_role_in_default_in_namespace_only_mode(watched: tuple[str, ...],
                                                                    node_events: bool) -> None:
    """Issue 36 item 10: with watchNamespaces and nodeEscalation the ClusterRole granted events create in every
    namespace for the one Node Event, which the watchdog writes in namespace default (NODE_EVENT_NAMESPACE). A
    Role in default grants exactly that create, bound to the ServiceAccount; no Role is rendered for it without
    nodeEscalation or without watchNamespaces (the ClusterRole's pod rules grant it there)."""
    values = ("--set", f"watchNamespaces={{{','.join(watched)}}}", *NODES)
    rendered = template(*values)
    assert ("", "events", "create", "") not in rbac_grants(one(rendered, "ClusterRole"))
    role, binding = (roles_by_purpose(rendered, kind).get("node-events") for kind in ("Role", "RoleBinding"))
    default_roles = [o for o in objects(rendered) if o["kind"] == "Role" and o["metadata"]["namespace"] == "default"]
    assert [rbac_grants(r) & {("", "events", "create", "")} for r in default_roles] == [{("", "events", "create", "")}]
    if not node_events:
        assert role is None and binding is None
        return
    assert role is not None and binding is not None
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NODE_EVENT_NAMESPACE
    assert_grants(rbac_grants(role), {("", "events", "create", "")})
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    account = one(rendered, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    for without in (WATCHED, NODES):
        assert "node-events" not in roles_by_purpose(template(*without))


@pytest.mark.parametrize(("values", "want"), [
    (("--set", "config.action=delete", "--set-json", 'config.targets=[{"name":"a","podSelector":"app=a"},'
      '{"name":"b","podSelector":"app=b","action":"evict"}]'), DELETE_RBAC | EVICT_RBAC),
    (("--set", "config.action=evict", "--set-json", 'config.targets=[{"name":"a","podSelector":"app=a",'
      '"action":"delete"}]'), DELETE_RBAC),
    (("--set", "config.action=evict", "--set-json", 'config.targets=[{"name":"a","podSelector":"app=a"}]'),
     EVICT_RBAC),
])
def test_rbac_follows_each_targets_own_action(values: tuple[str, ...], want: set[tuple[str, str, str, str]],
                                              tmp_path: Path) -> None:
    """A target's own action (issue 30 item 1) gets its grant: an evicting target beside deleting ones needs
    pods/eviction, a deleting target under a global evict needs pods delete (and the other is not granted)."""
    rendered = template(*values)
    config, _ = config_from(rendered, tmp_path)  # the watchdog's own reading of the actions in use agrees
    used = actions(config)
    assert want == (DELETE_RBAC if "delete" in used else set()) | (EVICT_RBAC if "evict" in used else set())
    assert_grants(rbac_grants(one(rendered, "ClusterRole")), BASE_RBAC | want)


def test_namespace_only_mode_notes_name_the_namespaces() -> None:
    def notes(*values: str) -> str:
        done = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", *values)
        assert done.returncode == 0, done.stderr
        return done.stdout.split("NOTES:", 1)[1]

    assert ("NAMESPACE-ONLY MODE (watchNamespaces): pods are watched and acted on in team-a, team-b only"
            in notes("--set", "watchNamespaces={team-a,team-b}"))
    assert "NAMESPACE-ONLY" not in notes()


def test_without_watch_namespaces_there_is_no_namespace_role() -> None:
    rendered = template()
    assert not [o for o in objects(rendered) if o["kind"] in ("Role", "RoleBinding")
                and o["metadata"]["name"] == f"{RELEASE}-vllm-stall-watchdog"]
    assert "watchNamespaces" not in yaml.safe_load(one(rendered, "ConfigMap")["data"]["config.yaml"])


@pytest.mark.parametrize("bad", ["Team-A", "team_a", "-a", "a" * 64, "kube-system"])
def test_watch_namespaces_must_be_namespace_names(bad: str) -> None:
    assert "watchNamespaces" in template_fails("--set", f"watchNamespaces={{{bad}}}")


def test_kube_system_in_watch_namespaces_is_refused_in_the_watchdogs_words(tmp_path: Path) -> None:
    said = watchdog_refuses({"watchNamespaces": ["team-a", "kube-system"]}, tmp_path)
    assert said in template_fails("--set", "watchNamespaces={team-a,kube-system}")
    assert said == ("watchNamespaces names kube-system, which is never watched: leave it out (its Role would grant "
                    "pod deletes for nothing)")


def test_watch_namespaces_under_config_says_where_it_belongs() -> None:
    """`run --help` lists the file key watchNamespaces; in the chart it is the top-level list (it renders the Roles
    too): under config it is refused naming the top-level value."""
    stderr = template_fails("--set-json", 'config.watchNamespaces=["team-a"]')
    assert "at '/config/watchNamespaces': value must be 'not under config: set the top-level value " \
           "watchNamespaces (a list of namespaces" in stderr


def test_every_rbac_rule_has_its_own_comment() -> None:
    """Every rule in the templates, conditional ones included, has a comment line right above it."""
    counts = {}
    for name in ("clusterrole.yaml", "_helpers.tpl", "leader-election-role.yaml", "ledger-role.yaml",
                 "brake-role.yaml", "node-event-role.yaml"):
        lines = (CHART / "templates" / name).read_text().splitlines()
        rules = [i for i, line in enumerate(lines) if line.strip().startswith("- apiGroups:")]
        assert all(lines[i - 1].strip().startswith("#") for i in rules), name
        counts[name] = len(rules)
    # _helpers.tpl: the rules on pods, Events and owners (podRules), in the ClusterRole or a Role per watched
    # namespace; clusterrole.yaml: namespaces and nodes; node-event-role.yaml: the Node Event's create in default in
    # namespace-only mode
    assert counts == {"clusterrole.yaml": 2, "_helpers.tpl": 6, "leader-election-role.yaml": 2, "ledger-role.yaml": 2,
                      "brake-role.yaml": 1, "node-event-role.yaml": 1}


def test_cluster_role_binding_binds_the_service_account(production: str) -> None:
    binding = one(production, "ClusterRoleBinding")
    role, account = one(production, "ClusterRole"), one(production, "ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "vllm-watchdog", "namespace": NAMESPACE}]
    assert account["metadata"]["name"] == "vllm-watchdog"
    pod = one(production, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "vllm-watchdog"


def test_existing_service_account_needs_a_name() -> None:
    assert "serviceAccount.name is required" in template_fails("--set", "serviceAccount.create=false")
    rendered = template("--set", "serviceAccount.create=false", "--set", "serviceAccount.name=existing")
    assert "ServiceAccount" not in kinds(rendered)
    assert one(rendered, "ClusterRoleBinding")["subjects"][0]["name"] == "existing"


# --- rbac.create=false, and the chart README's list of every rule ---------------------------------------

RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
NO_RBAC = ("--set", "rbac.create=false")
ALL_FLAGS = (*EVICT, *NODES, *LEADER, "--set", "config.quarantine=true", "--set", "config.evidenceLogLines=20")


@pytest.mark.parametrize("values", [(), ALL_FLAGS, ("-f", str(PRODUCTION))], ids=["default", "every-flag",
                                                                                   "production"])
def test_rbac_create_false_renders_no_role_or_binding_and_nothing_else_changes(values: tuple[str, ...]) -> None:
    with_rbac, without = objects(template(*values)), objects(template(*values, *NO_RBAC))
    assert [o for o in without if o["kind"] in RBAC_KINDS] == []
    assert {o["kind"] for o in with_rbac} & RBAC_KINDS  # there was something to leave out
    assert without == [o for o in with_rbac if o["kind"] not in RBAC_KINDS]  # the rest, unchanged


def test_rbac_create_false_notes_say_what_to_grant() -> None:
    done = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", *NO_RBAC)
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    assert "RBAC is not created (rbac.create=false)" in notes and 'README lists under "RBAC"' in notes
    assert f"--as=system:serviceaccount:{NAMESPACE}:{RELEASE}-vllm-stall-watchdog" in notes
    default = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client")
    assert "RBAC is not created" not in default.stdout


CHART_README = CHART / "README.md"
# The conditions the README's RBAC table may name, read from the config the watchdog loads.
def actions(config: Any) -> set[str]:
    """The actions in use: each target's effective one (the watchdog's own rule, Settings.policy_of)."""
    return {config.policy_of(t)[0].action for t in config.targets}


README_WHEN: dict[str, Callable[[Any], bool]] = {
    "always": lambda c: True,
    "`config.action=delete` (the default), or a target's `action: delete`": lambda c: "delete" in actions(c),
    "`config.action=evict`, or a target's `action: evict`": lambda c: "evict" in actions(c),
    "`config.quarantine=true`": lambda c: c.quarantine,
    "`config.evidenceLogLines` > 0": lambda c: c.evidence_log_lines > 0,
    "`config.nodeEscalation=true`": lambda c: c.node_escalation,
    "`config.budgetLedger=true` (the default)": lambda c: c.budget_ledger,
    "`config.leaderElection=true`": lambda c: c.leader_election,
}


def readme_rbac_rows() -> list[list[str]]:
    """The cells of each row of the chart README's RBAC table (between its rbac-rules markers)."""
    text = CHART_README.read_text()
    table = text.split("<!-- rbac-rules:start -->", 1)[1].split("<!-- rbac-rules:end -->", 1)[0]
    lines = table.strip().splitlines()
    assert lines[0].startswith("| Where |") and set(lines[1]) <= set("|-")
    return [re.split(r"\s*\|\s*", line.strip().strip("|").strip()) for line in lines[2:]]


def readme_rbac(config: Any, fullname: str) -> dict[str, set[tuple[str, str, str, str]]]:
    """What the README says the chart grants for ``config``, per place: cluster-wide, release namespace, Lease
    namespace."""
    out: dict[str, set[tuple[str, str, str, str]]] = {"cluster-wide": set(), "release namespace": set(),
                                                       "Lease namespace": set()}
    for where, group, resources, verbs, name, when in readme_rbac_rows():
        assert where in out and when in README_WHEN, f"unknown place or condition in the README: {where!r} {when!r}"
        if not README_WHEN[when](config):
            continue
        (api_group,) = [g.strip('"') for g in re.findall(r"`([^`]*)`", group)]
        names = re.findall(r"`([^`]*)`", name)[:1] or [""]
        resource_name = names[0].replace("<fullname>", fullname).replace("<config.leaseName>", config.lease_name)
        for resource in re.findall(r"`([^`]*)`", resources):
            for verb in re.findall(r"`([^`]*)`", verbs):
                out[where].add((api_group, resource, verb, resource_name))
    return out


@pytest.mark.parametrize(
    "values",
    [(), ALL_FLAGS, ("--set", "config.quarantine=true", "--set", "config.action=quarantine"),
     ("-f", str(PRODUCTION)),
     (*LEADER, "--set", "config.leaderElectionNamespace=ops-leases", "--set", "config.leaseName=watchdog-a",
      "--set", "fullnameOverride=wd"),
     ("--set", "config.budgetLedger=false")],
    ids=["default", "every-flag", "action-quarantine", "production", "lease-elsewhere", "no-ledger"],
)
def test_the_chart_readmes_rbac_table_is_what_the_templates_grant(values: tuple[str, ...], tmp_path: Path) -> None:
    """The README's list of rules (what rbac.create=false users must grant) is the rendered RBAC, row by row."""
    rendered = template(*values)
    config, _ = config_from(rendered, tmp_path)
    want = readme_rbac(config, one(rendered, "Deployment")["metadata"]["name"])
    assert_grants(rbac_grants(one(rendered, "ClusterRole")), want["cluster-wide"])
    roles = roles_by_purpose(rendered)
    lease = roles.pop("leader-election", None)
    assert {r["metadata"]["namespace"] for r in roles.values()} == {NAMESPACE}
    assert_grants(set().union(*(rbac_grants(r, names_allowed=True) for r in roles.values())),
                  want["release namespace"])
    if lease is None:
        assert want["Lease namespace"] == set()
    else:
        assert lease["metadata"]["namespace"] == (config.leader_election_namespace or NAMESPACE)
        assert_grants(rbac_grants(lease, names_allowed=True), want["Lease namespace"])


def test_the_rbac_table_reader_sees_every_row() -> None:
    rows = readme_rbac_rows()
    assert len(rows) == 14 and all(len(row) == 6 for row in rows)
    assert {row[5] for row in rows} == set(README_WHEN)  # every condition is used, none unknown


# --- Deployment -----------------------------------------------------------------------------------------


def test_deployment_is_one_replica_recreate(default: str) -> None:
    spec = one(default, "Deployment")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


def test_replica_count_zero_pauses() -> None:
    assert one(template("--set", "replicaCount=0"), "Deployment")["spec"]["replicas"] == 0


@pytest.mark.parametrize("replicas", ["2", "3"])
def test_more_than_one_replica_is_refused_without_leader_election(replicas: str) -> None:
    stderr = template_fails("--set", f"replicaCount={replicas}")
    assert f"replicaCount={replicas} is allowed only with config.leaderElection=true" in stderr
    stderr = template_fails("--set", f"replicaCount={replicas}", "--set", "config.leaderElection=false")
    assert "only with config.leaderElection=true" in stderr


@pytest.mark.parametrize("values", [("--set", "replicaCount=2", *LEADER), ("-f", str(PRODUCTION))],
                         ids=["leader-election", "production"])
def test_with_leader_election_an_upgrade_rolls_one_pod_at_a_time(values: tuple[str, ...]) -> None:
    """Leader election makes two pods safe (only the Lease holder acts): an upgrade surges one new pod and stops
    an old one only once the new one is Ready, so a new pod that cannot start never leaves the fleet unwatched."""
    spec = one(template(*values), "Deployment")["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    single = one(template("--set", "replicaCount=1", *LEADER), "Deployment")["spec"]
    assert single["strategy"]["type"] == "RollingUpdate"


@pytest.mark.parametrize("values", VARIANTS)
def test_pod_namespace_comes_from_the_downward_api(values: tuple[str, ...]) -> None:
    """$POD_NAMESPACE is where the watchdog keeps its Lease when config.leaderElectionNamespace is unset."""
    (container,) = one(template(*values), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["env"][0] == {"name": "POD_NAMESPACE",
                                   "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    assert [e["name"] for e in container["env"]] == ["POD_NAMESPACE", "WATCHDOG_PAUSE_CONFIG_MAP"]  # the brake


@pytest.mark.parametrize("values", VARIANTS)
def test_pod_security_is_restricted(values: tuple[str, ...]) -> None:
    """Pod Security "restricted" with no fixed UID (the image's numeric USER applies; UID-range platforms such as
    OpenShift assign their own). tests/chart/test_chart_values.py overrides these values."""
    pod = one(template(*values), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "runAsNonRoot": True, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["tmp"]["mountPath"] == "/tmp" and "emptyDir" in volumes["tmp"]
    assert not any("hostPath" in v for v in pod["volumes"])
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))


def test_token_is_mounted_on_the_pod_only(default: str) -> None:
    assert one(default, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert one(default, "ServiceAccount")["automountServiceAccountToken"] is False


def test_container_runs_the_watchdog_on_its_config_file(default: str) -> None:
    pod = one(default, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["run", "--config", f"{CONFIG_DIR}/config.yaml"]
    assert "command" not in container  # the image's ENTRYPOINT (python -m watchdog) runs
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert mount["mountPath"] == CONFIG_DIR and mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    config_map = one(default, "ConfigMap")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert list(config_map["data"]) == ["config.yaml"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container["image"] == f"vllm-stall-watchdog:{app_version}"  # tag defaults to appVersion


def test_image_digest_wins_over_tag(production: str, production_values: dict[str, Any]) -> None:
    image = production_values["image"]
    container = one(production, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"{image['repository']}@{image['digest']}"
    assert container["imagePullPolicy"] == "Always"


@pytest.mark.parametrize("values", VARIANTS)
def test_probes_and_ports(values: tuple[str, ...]) -> None:
    rendered = template(*values)
    (container,) = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "http-metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    service = one(rendered, "Service")["spec"]
    assert service["ports"] == [{"name": "http-metrics", "port": 8080, "targetPort": "http-metrics",
                                 "protocol": "TCP"}]
    pod_labels = one(rendered, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= pod_labels.items()
    # a NotReady watchdog (source down, credentials refused) stays scraped and reachable by helm test
    assert service["publishNotReadyAddresses"] is True


def test_production_values_reach_the_pod(production: str, production_values: dict[str, Any]) -> None:
    deployment = one(production, "Deployment")
    meta, pod = deployment["spec"]["template"]["metadata"], deployment["spec"]["template"]["spec"]
    assert meta["labels"]["tier"] == "ops" and meta["labels"]["team"] == "ml-platform"
    assert meta["annotations"]["fluentbit.io/parser"] == "json"
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName", "imagePullSecrets"):
        assert pod[key] == production_values[key]
    assert pod["containers"][0]["resources"] == production_values["resources"]
    assert all(o["metadata"]["labels"]["team"] == "ml-platform" for o in objects(production))


# --- config checksum ------------------------------------------------------------------------------------


def checksum(*args: str) -> str:
    annotations = one(template(*args), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    value = annotations["checksum/config"]
    assert len(value) == 64
    return str(value)


def test_checksum_follows_the_config() -> None:
    base = checksum()
    assert checksum() == base
    assert checksum("--set", "podLabels.x=y") == base  # not part of the ConfigMap: no restart
    assert checksum("--set", "config.windowSeconds=300") != base
    assert checksum("--set", "config.dryRun=true") != base
    assert checksum("--set", "config.paused=true") != base  # the pause takes effect by restarting the pod
    assert checksum("--set", "config.targets[0].name=x", "--set", "config.targets[0].podSelector=app=x") != base


# --- values schema --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--set", "config.windowSeconds=abc"), "windowSeconds"),
        (("--set", "config.dryRun=maybe"), "dryRun"),
        (("--set-string", "replicaCount=1"), "replicaCount"),
        (("--set", "config.logFormat=xml"), "logFormat"),
        (("--set", "config.targets[0].profile=tgi"), "profile"),
        (("--set", "config.windowSecond=300"), "windowSecond"),  # typo: unknown key
        (("--set", "image.tags=1"), "tags"),
        (("--set", "leaderElection.enabled=true"), "leaderElection"),
        (("--set", "config.kubeconfig=/root/.kube/config"), "kubeconfig"),
        (("--set", "config.targets[0].selector=app=x"), "selector"),
        (("--set", "config.action=kill"), "action"),
        (("--set-json", "config.breakerFraction=1.5"), "breakerFraction"),
        (("--set", "config.breakerFraction=half"), "breakerFraction"),  # a string, but no decimal
        (("--set", "config.maxDeletions=0"), "maxDeletions"),
        (("--set", "config.nodeEscalationThreshold=1"), "nodeEscalationThreshold"),
        (("--set", "config.leaderElectionNamespace=Not_A_Namespace"), "leaderElectionNamespace"),
        (("--set", "config.nodeTaint=stalled=true"), "nodeTaint"),
        (("--set", "config.paused=yes"), "paused"),
    ],
    ids=["wrong-type-number", "wrong-type-bool", "wrong-type-int", "bad-enum", "bad-profile", "unknown-config-key",
         "unknown-image-key", "unknown-top-key", "kubeconfig-not-allowed", "unknown-target-key", "bad-action",
         "fraction-above-1", "fraction-not-a-decimal", "zero-budget", "threshold-below-2", "bad-lease-namespace",
         "taint-without-effect", "wrong-type-paused"],
)
def test_schema_rejects_wrong_types_and_unknown_keys(args: tuple[str, str], needle: str) -> None:
    assert needle in template_fails(*args)
    lint = helm("lint", "--strict", str(CHART), *args)
    assert lint.returncode != 0 and needle in lint.stdout + lint.stderr


def walk_schema(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for key, child in node.get("properties", {}).items():
        yield from walk_schema(child, f"{path}.{key}".lstrip("."))
    if isinstance(node.get("items"), dict):
        yield from walk_schema(node["items"], f"{path}[]")


def test_every_declared_object_in_the_schema_is_closed(schema: dict[str, Any]) -> None:
    open_objects = [p or "<root>" for p, n in walk_schema(schema) if "properties" in n
                    and n.get("additionalProperties") is not False]
    assert not open_objects


def test_chart_config_exposes_every_watchdog_setting(schema: dict[str, Any]) -> None:
    """A setting added to watchdog/config/loader.py must be added to the chart (schema and values.yaml) too."""
    wanted = {s.key for s in SETTINGS} - NOT_IN_CHART | {"targets"}
    misplaced = {BY_NAME[n].key for n in chart_schema.MISPLACED}  # refused there, saying where they go
    assert set(schema["properties"]["config"]["properties"]) == wanted | misplaced
    assert set(yaml.safe_load((CHART / "values.yaml").read_text())["config"]) == wanted


def test_the_schema_is_generated_from_the_settings_and_profile_tables(schema: dict[str, Any]) -> None:
    """Each config property (type, bounds, enum, default, help), the cross-setting rules and the targets' profile
    and source enums are what tests/chart/values_schema.py makes of the tables: no bound or enum written twice."""
    path = CHART / "values.schema.json"
    assert path.read_text() == chart_schema.dumps(chart_schema.chart_schema(schema)), (
        f"{path.relative_to(REPO)} differs from the settings table: run "
        "`.venv/bin/python tests/chart/values_schema.py` (edit watchdog/config/settings.py for a setting; the "
        "chart-only parts of the schema by hand)")
    rules = CHART / "templates" / "_rules.tpl"
    assert rules.read_text() == chart_schema.chart_rules(), (
        f"{rules.relative_to(REPO)} differs from settings.COMPARISONS: run "
        "`.venv/bin/python tests/chart/values_schema.py`")
    props = schema["properties"]["config"]["properties"]
    assert props["breakerFraction"]["maximum"] == 1  # a fraction of the watched pods
    assert props["targets"]["items"]["properties"]["profile"]["enum"] == [
        "vllm", "sglang", "llamacpp", "trtllm", "lmdeploy"]


def test_values_yaml_config_defaults_are_the_settings_table() -> None:
    """values.yaml writes each setting's default for its readers; it must be the table's (null: unset)."""
    config = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    differ = {key: (value, BY_KEY[key].default) for key, value in config.items()
              if key != "targets" and (value, type(value) is bool) != (BY_KEY[key].default,
                                                                       type(BY_KEY[key].default) is bool)}
    assert not differ
    assert config["targets"] == [target_to_dict(t) for t in DEFAULT_TARGETS]


def test_every_values_key_is_documented(schema: dict[str, Any]) -> None:
    """Each key of values.yaml that the schema declares has a comment line right above it."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    undocumented, seen = [], 0
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#") or stripped.startswith("-") or ":" not in stripped:
            continue
        indent, key = len(line) - len(stripped), stripped.split(":", 1)[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        node: dict[str, Any] | None = schema
        for _, parent in stack:
            node = (node or {}).get("properties", {}).get(parent)
        stack.append((indent, key))
        if node is None or key not in node.get("properties", {}):
            continue  # inside a free-form map or a list (targets, resources, labels)
        seen += 1
        if not lines[i - 1].lstrip().startswith("#"):
            undocumented.append(".".join(k for _, k in stack))
    assert seen > 40 and not undocumented


# --- no drift between the chart's ConfigMap and what the watchdog reads ---------------------------------


def test_watchdog_reads_exactly_the_values_the_chart_was_given(
    production: str, production_values: dict[str, Any], tmp_path: Path
) -> None:
    config, raw = config_from(production, tmp_path)
    given = production_values["config"]
    for key, value in given.items():
        if key != "targets":
            assert getattr(config, BY_KEY[key].name) == value, key
    assert config.listen_address == "[::]:8080"  # dual-stack: IPv4, IPv6-only and dual-stack clusters
    assert set(raw) == set(given) | {"listenAddress"} | DEMO_ONLY  # DEMO_ONLY: the chart's own false
    defaults = {"profile": "vllm", "port": "http", "path": "/metrics"}
    expected = [{**defaults, **t, "port": str(t.get("port", "http"))} for t in given["targets"]]
    assert [target_to_dict(t) for t in config.targets] == expected
    # Every non-target setting really differs from the code default, so this test cannot pass by accident, and
    # every setting the chart exposes is given, so a new setting cannot skip this test.
    same = [k for k, v in given.items() if k != "targets" and v == BY_KEY[k].default]
    assert not same
    assert set(given) == {s.key for s in SETTINGS} - NOT_IN_CHART - DEMO_ONLY - OTHER_ALTERNATIVE | {"targets"}
    assert not any(getattr(config, BY_KEY[k].name) for k in DEMO_ONLY)
    # The safety-rail values the production file is about, spelled out.
    assert (config.action, config.leader_election, config.node_escalation) == ("evict", True, True)
    assert (config.max_deletions, config.max_deletions_per_namespace, config.namespace_selector) == (3, 2, "shard=a")
    assert config.paused is True and config.min_pod_age_seconds == 450.0 and config.breaker_fraction == 0.5


def test_chart_defaults_equal_the_watchdog_defaults(default: str, tmp_path: Path) -> None:
    config, raw = config_from(default, tmp_path)
    code = load_config(env={})
    assert config.values() == code.values()
    assert config.targets == DEFAULT_TARGETS
    # null in values: left out, i.e. unset (the pod's own grace period; the window; $POD_NAMESPACE).
    assert not {"gracePeriodSeconds", "minPodAgeSeconds", "leaderElectionNamespace"} & set(raw)
    assert config.min_pod_age_seconds is None and config.leader_election_namespace is None


def set_json(settings: dict[str, Any]) -> list[str]:
    return [a for k, v in settings.items() for a in ("--set-json", f"config.{k}={json.dumps(v)}")]


def watchdog_refuses(settings: dict[str, Any], tmp_path: Path) -> str:
    """The watchdog's start-up verdict on ``settings`` as a config file: its problems, one per line."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(settings))
    with pytest.raises(ConfigError) as refused:
        load_config(file=str(path), env={})
    return str(refused.value)


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        ({"source": "prometheus"}, "at '/config/prometheusUrl': got null, want string"),
        ({"prometheusUrl": "http://user:pw@prom:9090"}, "/config/prometheusUrl"),
        ({"prometheusPasswordFile": "/p"}, "at '/config/prometheusUsernameFile': got null, want string"),
        ({"prometheusUsernameFile": "/u"}, "at '/config/prometheusPasswordFile': got null, want string"),
        ({"prometheusUsernameFile": "/u", "prometheusPasswordFile": "/p", "prometheusBearerTokenFile": "/t"},
         "at '/config/prometheusBearerTokenFile': got string, want null"),
        ({"prometheusStalenessSeconds": 600}, "/config/prometheusStalenessSeconds"),
        ({"targets": [{"name": "t", "podSelector": "a=b", "source": "prometheus"}]},
         "at '/config/prometheusUrl': got null, want string"),
        ({"prometheusPodLabel": "__x"}, "/config/prometheusPodLabel"),
        ({"source": "pods"}, "/config/source"),
        ({"action": "quarantine"}, "at '/config/quarantine': value must be true"),
        ({"breakerFraction": 1.01}, "/config/breakerFraction': maximum"),
        ({"deletionWindowSeconds": 100000}, "/config/deletionWindowSeconds': maximum"),
        ({"workers": 100000}, "/config/workers': maximum"),
        ({"apiTimeoutSeconds": 1000}, "/config/apiTimeoutSeconds': maximum"),
        ({"maxBodyBytes": 100000000000}, "/config/maxBodyBytes': maximum"),
    ],
)
def test_the_schema_refuses_at_install_what_the_watchdog_would_refuse(settings: dict[str, Any], needle: str,
                                                                      tmp_path: Path) -> None:
    """Bounds, enums and the cross-setting rules a schema can express fail `helm install/template` (instead of a
    CrashLoopBackOff); the watchdog agrees that the same settings are invalid."""
    assert needle in template_fails(*set_json(settings))
    watchdog_refuses(settings, tmp_path)


# One case per rule the schema cannot express (settings.COMPARISONS, target names, label selectors): `helm template`
# fails naming the key, in the watchdog's words.
RULE_CASES = {
    "window-3-intervals": {"windowSeconds": 30, "scrapeIntervalSeconds": 15},
    "window-3-intervals-target": {"targets": [{"name": "llm", "podSelector": "app=vllm", "windowSeconds": 30}]},
    "deadline-shorter-than-interval": {"scrapeDeadlineSeconds": 15, "scrapeIntervalSeconds": 15},
    "jitter-shorter-than-interval": {"jitterSeconds": 15, "scrapeIntervalSeconds": 15},
    "connect-within-deadline": {"connectTimeoutSeconds": 5, "scrapeDeadlineSeconds": 3},
    "completion-600": {"completionOnlyWindowSeconds": 100},
    "completion-at-least-window": {"completionOnlyWindowSeconds": 700, "windowSeconds": 800},
    "completion-at-least-window-target": {"windowSeconds": 800, "targets": [
        {"name": "trt", "podSelector": "app=trt", "profile": "trtllm", "completionOnlyWindowSeconds": 700}]},
    "quarantine-before-window": {"quarantine": True, "quarantineAfterSeconds": 120},
    "quarantine-before-window-target": {"quarantine": True, "targets": [
        {"name": "llm", "podSelector": "app=vllm", "windowSeconds": 60}]},
    "namespace-budget-within-global": {"maxDeletionsPerNamespace": 5, "maxDeletions": 2},
    "api-timeout-under-lease": {"leaderElection": True, "apiTimeoutSeconds": 11},
}


@pytest.mark.parametrize("settings", RULE_CASES.values(), ids=RULE_CASES.keys())
def test_helm_template_refuses_a_comparison_in_the_watchdogs_words(settings: dict[str, Any], tmp_path: Path) -> None:
    """Each rule of settings.COMPARISONS fails `helm template` (GitOps renders with it: nothing reaches the cluster)
    with the watchdog's start-up problem, the key named where it is in the values (config.windowSeconds,
    config.targets[0].windowSeconds). The watchdog's first problem is the chart's, word for word."""
    stderr = template_fails(*set_json(settings))
    (chart_says,) = re.findall(r"execution error at \(vllm-stall-watchdog/templates/checks/values.yaml[^)]*\): (.*)",
                               stderr)
    watchdog_says = watchdog_refuses(settings, tmp_path).splitlines()[0]
    assert chart_says.replace("config.", "") == watchdog_says
    assert chart_says.startswith(("config.windowSeconds", "config.targets[0].", "config.scrape", "config.jitter",
                                  "config.connect", "config.completion", "config.quarantine", "config.maxDeletions",
                                  "config.apiTimeout"))


@pytest.mark.parametrize(("settings", "chart_says", "watchdog_says"), [
    ({"targets": [{"name": "a", "podSelector": "app=a"}, {"name": "a", "podSelector": "app=b"}]},
     "config.targets: target name 'a' is used twice", "target name 'a' is used twice"),
    ({"targets": [{"name": "a", "podSelector": "app in (a,b"}]},
     "config.targets[0].podSelector: 'app in (a,b' is not a valid label selector",
     "'app in (a,b' is not a valid label selector"),
    ({"namespaceSelector": "shard in ()"}, "config.namespaceSelector: 'shard in ()' is not a valid label selector",
     "'shard in ()' is not a valid label selector"),
], ids=["duplicate-target-name", "pod-selector-grammar", "namespace-selector-grammar"])
def test_helm_template_refuses_target_names_and_selectors(settings: dict[str, Any], chart_says: str,
                                                          watchdog_says: str, tmp_path: Path) -> None:
    assert chart_says in template_fails(*set_json(settings))
    assert watchdog_says in watchdog_refuses(settings, tmp_path)


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        ({"source": "prometheus", "prometheusUrl": "http://p:9090", "prometheusTimeoutSeconds": 15},
         "prometheusTimeoutSeconds (15) must be shorter than scrapeIntervalSeconds (15)"),
        ({"prometheusPodLabel": "namespace"}, "the namespace and pod labels must differ"),
    ],
)
def test_the_watchdog_refuses_at_start_up_what_the_chart_leaves_to_it(settings: dict[str, Any], needle: str,
                                                                       tmp_path: Path) -> None:
    """The Prometheus cross-checks (watchdog/config/sources.py) are not in settings.COMPARISONS yet: the chart
    renders, and the watchdog refuses the rendered ConfigMap at start-up with that rule's message."""
    rendered = template(*set_json(settings))
    text = one(rendered, "ConfigMap")["data"]["config.yaml"]
    assert needle in watchdog_refuses(yaml.safe_load(text), tmp_path)


def test_a_refused_config_is_one_json_line(tmp_path: Path) -> None:
    """What `kubectl logs` shows for a CrashLoopBackOff of the watchdog (a config from elsewhere than the chart):
    `run` on it exits 2 with one JSON log line naming every problem."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"windowSeconds": 30, "maxDeletionsPerNamespace": 3}))
    done = subprocess.run([sys.executable, "-m", "watchdog", "run", "--config", str(path)], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd=REPO)
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    record = json.loads(line)
    assert record["msg"].startswith("configuration refused, 2 problems: windowSeconds (30) must be at least 3")
    assert record["problems"][1] == ("maxDeletionsPerNamespace (3) must not exceed maxDeletions (2), the "
                                     "cluster-wide budget")


@pytest.mark.parametrize(
    "settings",
    [
        {"maxDeletionsPerNamespace": 2, "maxDeletions": 2},
        {"breakerFraction": 1},
        {"breakerFraction": 0},
        {"minPodAgeSeconds": 0, "breakerCooldownSeconds": 0},
        {"completionOnlyWindowSeconds": 600},
        {"completionOnlyWindowSeconds": 800, "windowSeconds": 800},
    ],
)
def test_chart_accepts_the_edge_values_the_watchdog_accepts(settings: dict[str, Any], tmp_path: Path) -> None:
    """The schema is not stricter than the watchdog either: edge values render and load."""
    config, raw = config_from(template(*set_json(settings)), tmp_path)
    for key, value in settings.items():
        assert raw[key] == value and getattr(config, BY_KEY[key].name) == value


TAINTS = [
    "vllm-watchdog.io/stalled=true:NoSchedule", "gpu-suspect:NoExecute", "example.com/bad-gpu=:PreferNoSchedule",
    "a" * 63 + ":NoSchedule", "a" * 64 + ":NoSchedule", "k=" + "v" * 64 + ":NoSchedule",
    "stalled=true", "vllm-watchdog.io/stalled=true:Evict", "bad key=true:NoSchedule", "stalled_=true:NoSchedule",
    "UPPER.example.com/x:NoSchedule", "k=-v:NoSchedule", "=v:NoSchedule",
]


@pytest.mark.parametrize("taint", TAINTS)
def test_chart_and_watchdog_agree_on_the_node_taint(taint: str, tmp_path: Path) -> None:
    """values.schema.json's nodeTaint pattern accepts exactly what the watchdog accepts (its verdict is the
    oracle, so a change of the code's taint grammar fails here until the chart follows)."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"nodeTaint": taint}))
    try:
        load_config(file=str(path), env={})
        code_accepts = True
    except ConfigError:
        code_accepts = False
    done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--set-json",
                f"config.nodeTaint={json.dumps(taint)}")
    assert (done.returncode == 0) == code_accepts, done.stderr
    if not code_accepts:
        assert "/config/nodeTaint'" in done.stderr


# --- optional objects -----------------------------------------------------------------------------------


def test_optional_objects_are_off_by_default(default: str) -> None:
    assert kinds(default) == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Pod", "Role", "Role",
                              "RoleBinding", "RoleBinding", "Service", "ServiceAccount"]  # Roles: ledger, brake
    # The Pod is the `helm test` hook (test_helm_test_hook.py): created by `helm test` only, never by install.


def test_service_monitor_scrapes_the_metrics_port(production: str) -> None:
    monitor = one(production, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"] == [{"port": "http-metrics", "path": "/metrics", "interval": "15s",
                                             "scrapeTimeout": "5s"}]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= one(production, "Service")["metadata"][
        "labels"].items()


def test_the_bearer_token_alternative_passes_through(tmp_path: Path) -> None:
    config, _ = config_from(template("--set", "config.prometheusBearerTokenFile=/var/run/secrets/p/token"), tmp_path)
    assert config.prometheus_bearer_token_file == "/var/run/secrets/p/token"
    assert config.prometheus_username_file is None


def test_network_policy_allows_only_scrapes_dns_apiserver_and_metrics(production: str) -> None:
    policy = one(production, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"] == [{"ports": [{"port": "http-metrics", "protocol": "TCP"}],
                                  "from": [{"namespaceSelector": {"matchLabels": {
                                      "kubernetes.io/metadata.name": "monitoring"}}}]}]
    scrape, dns, prometheus, api = policy["egress"]
    assert prometheus == {"ports": [{"port": 9090, "protocol": "TCP"}], "to": [{"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}
    assert scrape["to"] == [{"namespaceSelector": {"matchExpressions": [
        {"key": "vllm-watchdog.io/enabled", "operator": "In", "values": ["true", "dry-run"]}]}}]
    # The ports of the production targets: http, 30000, metrics (numbers stay numbers).
    assert scrape["ports"] == [{"port": "http", "protocol": "TCP"}, {"port": 30000, "protocol": "TCP"},
                               {"port": "metrics", "protocol": "TCP"}]
    assert dns["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert api["to"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "172.20.0.0/28"}}]
    assert [p["port"] for p in api["ports"]] == [443, 6443]


def test_network_policy_explicit_scrape_ports_and_open_apiserver() -> None:
    rendered = template("--set", "networkPolicy.enabled=true", "--set", "networkPolicy.scrapePorts={8000,metrics}")
    policy = one(rendered, "NetworkPolicy")["spec"]
    scrape, _dns, api = policy["egress"]
    assert scrape["ports"] == [{"port": 8000, "protocol": "TCP"}, {"port": "metrics", "protocol": "TCP"}]
    assert "to" not in api  # no cidrs: any destination on the API server ports
    assert "from" not in policy["ingress"][0]


def test_network_policy_lets_the_prometheus_source_reach_prometheus_only_when_used() -> None:
    scrape_only = one(template("--set", "networkPolicy.enabled=true"), "NetworkPolicy")["spec"]
    assert len(scrape_only["egress"]) == 3  # scrape, DNS, API server: no Prometheus rule
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    for source in (["--set", "config.source=prometheus"],
                   ["--set-json", 'config.targets=[{"name":"vllm","podSelector":"app=vllm","source":"prometheus"}]']):
        rendered = template("--set", "networkPolicy.enabled=true", *source, "--set", "config.prometheusUrl=http://p:9090",
                            "--set-json", f"networkPolicy.prometheus.to=[{json.dumps(peer)}]",
                            "--set", "networkPolicy.prometheus.ports={9090,web}")
        _scrape, _dns, prometheus, _api = one(rendered, "NetworkPolicy")["spec"]["egress"]
        assert prometheus == {"ports": [{"port": 9090, "protocol": "TCP"}, {"port": "web", "protocol": "TCP"}],
                              "to": [peer]}


def test_the_prometheus_secret_is_mounted_read_only_for_the_credential_files() -> None:
    rendered = template("--set", "prometheusSecret=prom-basic-auth")
    pod = one(rendered, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "prometheus-secret", "secret": {"secretName": "prom-basic-auth"}} in pod["volumes"]
    mount = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "prometheus-secret"]
    assert mount == [{"name": "prometheus-secret", "mountPath": "/var/run/secrets/vllm-watchdog/prometheus",
                      "readOnly": True}]
    plain = one(template(), "Deployment")["spec"]["template"]["spec"]
    assert all(v["name"] != "prometheus-secret" for v in plain["volumes"])


def test_notes_tell_how_to_opt_in_dry_run_first() -> None:
    done = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client")
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    assert "kubectl label namespace NAMESPACE vllm-watchdog.io/enabled=dry-run" in notes
    assert "kubectl get events -A --field-selector reason=StalledPodDryRun" in notes
    assert "vllm-watchdog.io/enabled=true --overwrite" in notes
    assert "kubectl get events -A --field-selector reason=StalledPodDeletionDeferred" in notes
    assert "PAUSED" not in notes and "Leader election is on" not in notes and "Node escalation is on" not in notes


def test_notes_announce_the_safety_modes_that_are_on() -> None:
    done = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client",
                "-f", str(PRODUCTION))
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    assert "PAUSED (config.paused=true)" in notes and "Eviction mode (config.action=evict)" in notes
    assert f"share the Lease {NAMESPACE}/vllm-stall-watchdog-shard-a" in notes
    assert "vllm-watchdog.io/stalled=shard-a:NoSchedule" in notes


# --- RUNBOOK.md commands agree with this chart and this code --------------------------------------------

RUNBOOK = (REPO / "RUNBOOK.md").read_text()


def test_runbook_helm_settings_are_real_values() -> None:
    """Every ``--set``/``--set-json key=value`` the runbook tells an operator to type renders with this chart
    (alone: settings that need each other are written comma-joined in one ``--set``)."""
    settings = set(re.findall(r"(--set(?:-json)?) ([\w.\[\]]+=[^\s`|]+)", RUNBOOK))
    typo = ("--set", "config.windowSecond=300")  # the runbook's example of a typo the schema rejects
    assert typo in settings and "windowSecond" in template_fails(*typo)
    settings.discard(typo)
    assert len(settings) >= 15, settings
    assert ("--set", "config.breakerFraction=0.5") in settings  # a fraction through plain --set
    for flag, setting in sorted(settings):
        template(flag, setting)  # fails on an unknown key (closed schema) or a refused value


def test_runbook_uses_this_charts_names() -> None:
    assert "helm install vllm-stall-watchdog ./helm/vllm-stall-watchdog" in RUNBOOK
    names = {o["metadata"]["name"] for o in objects(
        helm("template", "vllm-stall-watchdog", str(CHART)).stdout)}
    # the ledger's and the brake's Role and RoleBinding; the `helm test` Pod
    assert names == {"vllm-stall-watchdog", "vllm-stall-watchdog-ledger", "vllm-stall-watchdog-brake",
                     "vllm-stall-watchdog-test"}
    assert "deploy/vllm-stall-watchdog" in RUNBOOK
    assert "serviceaccount:vllm-stall-watchdog:vllm-stall-watchdog" in RUNBOOK


def test_the_metrics_reference_documents_the_watchdogs_metrics() -> None:
    """docs/metrics.md documents every metric the watchdog exposes, under its exposed name, and no other; the
    runbook and the other docs name only exposed ones."""
    from watchdog.adapters.metrics import new_metrics

    families = new_metrics().registry.collect()
    exposed = {f.name + "_total" if f.type == "counter" else f.name for f in families
               if f.name.startswith("vllm_watchdog_")}  # not prometheus_client's process_* collector

    def mentioned(text: str) -> set[str]:
        return set(re.findall(r"\bvllm_watchdog_[a-z_]+[a-z]", text))
    documented = mentioned((REPO / "docs" / "metrics.md").read_text())
    assert documented == exposed, f"only in the docs: {documented - exposed}, undocumented: {exposed - documented}"
    for doc in (REPO / "RUNBOOK.md", *sorted((REPO / "docs").glob("*.md"))):
        assert mentioned(doc.read_text()) <= exposed, doc


def test_runbook_links_and_section_numbers_resolve() -> None:
    """Every in-page link points at a heading (GitHub anchors), and every "section N" exists."""
    headings = re.findall(r"^#{2,3} (.+)$", RUNBOOK, flags=re.M)
    anchors = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
    links = set(re.findall(r"\]\(#([^)]+)\)", RUNBOOK))
    assert len(links) >= 10 and links <= anchors, f"dangling: {links - anchors}"
    numbers = {h.split()[0] for h in re.findall(r"^## (.+)$", RUNBOOK, flags=re.M)}
    cited = set(re.findall(r"\bsections? (\d+)", RUNBOOK))
    assert cited and cited <= numbers, f"no such section: {cited - numbers}"


def test_runbook_documents_every_deferral_rule() -> None:
    from watchdog.adapters.metrics import DEFERRAL_RULES, REMEDIATION_RESULTS

    section = RUNBOOK.split("## 4 Why is this wedged pod not deleted?", 1)[1].split("\n## ", 1)[0]
    table = dict(re.findall(r"^\| `(\w+)` \| (.+) \|$", section, flags=re.M))
    assert set(table) == set(DEFERRAL_RULES), set(table) ^ set(DEFERRAL_RULES)  # every rule, one row each
    assert "--field-selector reason=StalledPodDeletionDeferred" in section
    assert [r for r in REMEDIATION_RESULTS if f"`{r}`" not in RUNBOOK] == []
    untaint = f"kubectl taint nodes NODE {BY_KEY['nodeTaint'].default}-"  # the default taint, removed
    for text in ("StalledNodeTainted", untaint, f"Lease `{BY_KEY['leaseName'].default}`"):
        assert text in RUNBOOK, text


def test_runbook_verbs_exist() -> None:
    from watchdog.cli.main import main

    verbs = set(re.findall(r"python -m watchdog (\w+)", RUNBOOK))
    assert {"check", "replay"} <= verbs
    for verb in verbs:
        with pytest.raises(SystemExit) as exit_info:
            main([verb, "--help"])
        assert exit_info.value.code == 0, verb


def test_runbook_uninstall_deletes_what_the_watchdog_leaves_behind() -> None:
    """Section 12 deletes the objects the watchdog (not Helm) creates: the deletion ledger ConfigMap and the Lease,
    under the names the chart's Roles allow it to create (so uninstall leaves nothing behind)."""
    section = RUNBOOK.split("## 12 Uninstall", 1)[1]
    rendered = template(*LEADER)
    roles = roles_by_purpose(rendered)
    ledger = {n for g, r, v, n in rbac_grants(roles["ledger"], names_allowed=True) if r == "configmaps" and n}
    lease = {n for g, r, v, n in rbac_grants(roles["leader-election"], names_allowed=True) if r == "leases" and n}
    assert ledger == {f"{BY_KEY['leaseName'].default}-ledger"} and lease == {BY_KEY["leaseName"].default}
    command = f"kubectl -n {NAMESPACE} delete configmap/{ledger.pop()} lease/{lease.pop()} "
    (line,) = [line for line in section.splitlines() if line.startswith(command)]
    assert line.endswith(" --ignore-not-found")  # the Lease exists only with leader election (+ the helm test Pod)
    assert "never been applied to a real API server" not in RUNBOOK

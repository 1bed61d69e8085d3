"""Discovery: namespace and pod dicts -> scrape targets, every skip reason, port choice. Pure: plain dicts only."""

from __future__ import annotations

from typing import Any

import pytest
from builders import BASE

from watchdog.core.discovery import Discovery, choose_port, discover, namespace_modes, tenant_of
from watchdog.core.escalation import NodeStallHistory
from watchdog.core.model import DEFAULT_TARGETS, EXCLUDE_ANNOTATION, NAMESPACE_LABEL, PORT_ANNOTATION, OwnerRef, Target
from watchdog.core.profiles import get_profile
from watchdog.demo.scenario import pod_manifest

TARGET = Target("vllm", "app.kubernetes.io/name=vllm")
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "llama-7d9f", "uid": "rs-uid"}}


def ns(name: str, value: str | None = "true") -> dict[str, Any]:
    labels = {} if value is None else {NAMESPACE_LABEL: value}
    return {"metadata": {"name": name, "labels": labels}}


def pod(name: str = "llama-0", *, namespace: str = "ml", ip: str = "10.1.2.3", port: int = 8000,
        uid: str | None = None, **kw: Any) -> dict[str, Any]:
    kw.setdefault("owner", RS)
    p = pod_manifest(namespace, name, ip, port, **kw)
    p["metadata"]["uid"] = uid or f"uid-{name}"
    return p


def run(pods: list[dict[str, Any]], namespaces: list[dict[str, Any]] | None = None,
        target: Target = TARGET, **kw: Any) -> Discovery:
    return discover(namespaces if namespaces is not None else [ns("ml")], [(target, pods)], base=BASE, **kw)


def skipped_for(p: dict[str, Any], **kw: Any) -> dict[str, int]:
    found = run([p], **kw)
    assert found.targets == []
    return dict(found.skipped)


# -- namespaces ------------------------------------------------------------------------------------------------
def test_namespace_modes_from_the_label_value() -> None:
    modes = namespace_modes([
        ns("a", "true"), ns("b", "dry-run"), ns("c", "True"), ns("d", "false"), ns("e", "yes"), ns("f", ""),
        ns("g", None), ns("kube-system", "true"), {"metadata": {"labels": {NAMESPACE_LABEL: "true"}}},
    ])
    assert modes == {"a": "enforce", "b": "dry-run"}


def test_target_mode_follows_its_namespace() -> None:
    found = discover([ns("ml"), ns("obs", "dry-run")],
                     [(TARGET, [pod("a", namespace="ml"), pod("b", namespace="obs")])], base=BASE)
    assert [(t.name, t.mode) for t in found.targets] == [("a", "enforce"), ("b", "dry-run")]


@pytest.mark.parametrize("namespaces", [[], [ns("ml", None)], [ns("ml", "enabled")], [ns("ml", "false")]])
def test_pod_in_a_namespace_not_opted_in_is_skipped(namespaces: list[dict[str, Any]]) -> None:
    assert skipped_for(pod(), namespaces=namespaces) == {"namespace_not_enabled": 1}


def test_kube_system_is_never_watched_even_when_labelled() -> None:
    p = pod(namespace="kube-system")
    assert skipped_for(p, namespaces=[ns("kube-system", "true")]) == {"namespace_not_enabled": 1}


# -- skip reasons ----------------------------------------------------------------------------------------------
def test_a_plain_good_pod_is_a_target_with_every_field() -> None:
    found = run([pod("llama-0", ip="10.1.2.3", port=8000, restart_count=0)])
    assert found.skipped == {}
    [t] = found.targets
    assert (t.uid, t.namespace, t.name, t.ip, t.port, t.path) == ("uid-llama-0", "ml", "llama-0", "10.1.2.3",
                                                                 8000, "/metrics")
    assert (t.target_name, t.profile, t.mode, t.restart_count) == ("vllm", "vllm", "enforce", 0)
    assert t.owner == OwnerRef("apps/v1", "ReplicaSet", "llama-7d9f", "rs-uid")
    assert t.url == "http://10.1.2.3:8000/metrics"
    assert t.ref == "ml/llama-0"
    assert found.ready_uids == {"uid-llama-0"}


def test_excluded_by_annotation() -> None:
    assert skipped_for(pod(annotations={EXCLUDE_ANNOTATION: "true"})) == {"excluded": 1}
    # Only the exact value "true" opts out.
    assert len(run([pod(annotations={EXCLUDE_ANNOTATION: "false"})]).targets) == 1


def test_terminating_pod_is_skipped() -> None:
    p = pod()
    p["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert skipped_for(p) == {"terminating": 1}


@pytest.mark.parametrize("phase", ["Pending", "Succeeded", "Failed", "Unknown", None])
def test_pod_not_running_is_skipped(phase: str | None) -> None:
    p = pod()
    p["status"]["phase"] = phase
    assert skipped_for(p) == {"not_running": 1}


def test_host_network_pod_is_skipped() -> None:
    assert skipped_for(pod(host_network=True)) == {"host_network": 1}


@pytest.mark.parametrize("ip", ["", None])
def test_pod_without_ip_is_skipped(ip: str | None) -> None:
    p = pod()
    p["status"]["podIP"] = ip
    assert skipped_for(p) == {"no_ip": 1}


@pytest.mark.parametrize("ip", ["169.254.169.254", "169.254.1.1", "0.0.0.0", "224.0.0.1", "239.1.2.3",
                                "255.255.255.255", "fe80::1", "::", "ff02::1", "::ffff:169.254.169.254",
                                "not-an-ip", "10.0.0.1:80"])
def test_unsafe_ip_is_refused(ip: str) -> None:
    assert skipped_for(pod(ip=ip)) == {"unsafe_ip": 1}


@pytest.mark.parametrize("ip", ["10.0.0.7", "192.168.1.2", "100.64.0.1", "fd00::7"])  # loopback: test_addresses
def test_routable_unicast_ip_is_accepted(ip: str) -> None:
    assert [t.ip for t in run([pod(ip=ip)]).targets] == [ip]


def test_never_ready_pod_is_skipped_but_one_seen_ready_before_is_judged() -> None:
    p = pod(ready=False)
    assert skipped_for(p) == {"never_ready": 1}
    found = run([p], ever_ready={"uid-llama-0"})
    assert [t.name for t in found.targets] == ["llama-0"]
    assert found.ready_uids == set()  # not Ready now: not reported as seen Ready


def test_ready_uids_include_ready_pods_that_are_skipped_for_other_reasons() -> None:
    found = run([pod("a"), pod("b", ready=False), pod("c", owner=None)])
    assert found.ready_uids == {"uid-a", "uid-c"}


def test_bare_pod_is_skipped_unless_controller_is_not_required() -> None:
    bare = pod(owner=None)
    assert skipped_for(bare) == {"no_controller": 1}
    found = run([bare], require_controller=False)
    assert [(t.name, t.owner) for t in found.targets] == [("llama-0", None)]


def test_owner_reference_that_is_not_the_controller_does_not_count() -> None:
    p = pod()
    p["metadata"]["ownerReferences"][0]["controller"] = False
    assert skipped_for(p) == {"no_controller": 1}


def test_pod_without_uid_is_skipped() -> None:
    p = pod()
    del p["metadata"]["uid"]
    assert skipped_for(p) == {"no_uid": 1}


def test_port_annotation_naming_an_undeclared_port_refuses_the_pod() -> None:
    assert skipped_for(pod(annotations={PORT_ANNOTATION: "metrics"})) == {"undeclared_port": 1}
    assert skipped_for(pod(port=8000, annotations={PORT_ANNOTATION: "9100"})) == {"undeclared_port": 1}


def test_skip_reasons_are_counted_per_pod() -> None:
    found = run([pod("a"), pod("b", host_network=True), pod("c", host_network=True), pod("d", ready=False)])
    assert [t.name for t in found.targets] == ["a"]
    assert found.skipped == {"host_network": 2, "never_ready": 1}


# -- port choice -----------------------------------------------------------------------------------------------
def two_ports(annotation: str | None = None) -> dict[str, Any]:
    p = pod(port=8000, annotations={PORT_ANNOTATION: annotation} if annotation else None)
    p["spec"]["containers"].append({"name": "sidecar", "ports": [{"name": "metrics", "containerPort": 9100}]})
    return p


def test_named_port_http_is_chosen_by_default() -> None:
    assert choose_port(two_ports(), TARGET) == 8000


def test_numeric_target_port_is_used_as_is() -> None:
    assert choose_port(two_ports(), Target("t", "a=b", port="9400")) == 9400


def test_target_port_by_name_among_all_containers() -> None:
    assert choose_port(two_ports(), Target("t", "a=b", port="metrics")) == 9100


@pytest.mark.parametrize("annotation", ["metrics", "9100"])
def test_annotation_chooses_among_declared_ports_by_name_or_number(annotation: str) -> None:
    assert choose_port(two_ports(annotation), TARGET) == 9100
    [t] = run([two_ports(annotation)]).targets
    assert t.url == "http://10.1.2.3:9100/metrics"


def test_annotation_wins_over_a_numeric_target_port() -> None:
    assert choose_port(two_ports("http"), Target("t", "a=b", port="9400")) == 8000


def test_profile_default_port_when_no_container_port_matches() -> None:
    p = pod(port=8000)
    p["spec"]["containers"][0]["ports"][0]["name"] = "api"
    assert choose_port(p, TARGET) == get_profile("vllm").default_port == 8000
    llama = Target("llamacpp", "app=llama", profile="llamacpp", port="nope")
    assert choose_port(p, llama) == get_profile("llamacpp").default_port
    p["spec"]["containers"][0]["ports"] = []
    assert choose_port(p, TARGET) == 8000


def test_url_uses_pod_ip_target_path_and_brackets_ipv6() -> None:
    target = Target("t", "a=b", path="/custom/metrics")
    [t] = run([pod(ip="fd00:10::7", port=8080)], target=target).targets
    assert t.url == "http://[fd00:10::7]:8080/custom/metrics"


# -- several targets, restart counts -----------------------------------------------------------------------------
BIG = Target("llama-405b", "app=llama-big", port="9999", path="/big", window_seconds=600.0)


@pytest.mark.parametrize("order", [(TARGET, BIG), (BIG, TARGET)])
def test_a_pod_two_targets_match_is_judged_by_the_longest_window_in_either_order(order: tuple[Target, ...]) -> None:
    """Issue 36 item 4: the default vllm target listed first took every pod, llama-405b's 600 s window was never
    used (its pods deleted at 120 s). Whatever the order, the most patient target judges, with all its settings."""
    p = pod(labels={"app.kubernetes.io/name": "vllm", "app": "llama-big"})
    found = discover([ns("ml")], [(t, [p]) for t in order], base=BASE)
    [t] = found.targets
    assert (t.target_name, t.port, t.path, t.targets) == ("llama-405b", 9999, "/big", tuple(x.name for x in order))
    [overlap] = found.overlaps
    assert (overlap.uid, overlap.chosen, overlap.targets) == ("uid-llama-0", "llama-405b", t.targets)
    assert "judged by llama-405b, the longest window" in overlap.note and "llama-405b (window 600 s)" in overlap.note


def test_a_shorter_target_never_shortens_the_window_and_equal_windows_go_to_the_first_listed() -> None:
    fast = Target("fast", "app=fast", window_seconds=30.0)
    p = pod()
    assert [t.target_name for t in discover([ns("ml")], [(fast, [p]), (TARGET, [p])], base=BASE).targets] == ["vllm"]
    evict = Target("evict", "app=e", action="evict")  # the global window too: a tie, the first listed judges
    found = discover([ns("ml")], [(evict, [p]), (TARGET, [p])], base=BASE)
    assert [t.target_name for t in found.targets] == ["evict"]
    assert "judged by evict, the longest window (the first listed of equal windows)" in found.overlaps[0].note


def test_targets_whose_profiles_differ_leave_the_pod_unjudged() -> None:
    p = pod()
    sglang = Target("other", "team=ml", profile="sglang", window_seconds=900.0)
    found = discover([ns("ml")], [(TARGET, [p]), (sglang, [p])], base=BASE)
    assert found.targets == [] and found.skipped == {"targets_conflict": 1}
    [overlap] = found.overlaps
    assert overlap.chosen is None and overlap.targets == ("vllm", "other")
    assert "engine profiles disagree on what progress is" in overlap.note


def test_a_skipped_pod_is_not_reported_as_an_overlap() -> None:
    p = pod(host_network=True)
    found = discover([ns("ml")], [(TARGET, [p]), (BIG, [p])], base=BASE)
    assert found.overlaps == [] and found.skipped == {"host_network": 1}


def test_default_targets_share_pods_without_duplicates() -> None:
    p = pod(labels={"app.kubernetes.io/name": "vllm", "inference.llmkube.dev/runtime": "vllm"})
    found = discover([ns("ml")], [(t, [p]) for t in DEFAULT_TARGETS], base=BASE)
    assert [(t.target_name, t.targets) for t in found.targets] == [("llmkube-vllm", ("llmkube-vllm", "vllm"))]
    assert found.overlaps == []  # interchangeable targets: no choice was made, nothing to report


def test_a_skipped_pod_matching_two_targets_is_counted_once() -> None:
    p = pod(host_network=True, labels={"app.kubernetes.io/name": "vllm", "inference.llmkube.dev/runtime": "vllm"})
    found = discover([ns("ml")], [(t, [p]) for t in DEFAULT_TARGETS], base=BASE)
    assert found.targets == [] and found.skipped == {"host_network": 1}


def test_restart_count_sums_every_container() -> None:
    p = pod(restart_count=2)
    p["status"]["containerStatuses"].append({"name": "sidecar", "restartCount": 3})
    p["status"]["containerStatuses"].append({"name": "init-like"})  # no restartCount: 0
    [t] = run([p]).targets
    assert t.restart_count == 5


def test_custom_metrics_of_the_target_are_carried() -> None:
    target = Target("custom", "a=b", metrics={"running": "my_running"})
    [t] = run([pod()], target=target).targets
    assert dict(t.metrics) == {"running": "my_running"}


def test_pods_of_a_terminating_namespace_are_never_targets() -> None:
    """A namespace being deleted: the namespace controller removes its pods, and the real API server refuses
    Events (and evictions) there with 403 — a deletion would spend budget and leave no Event to read back."""
    from watchdog.core.discovery import recheck

    ns = {"metadata": {"name": "llm", "labels": {NAMESPACE_LABEL: "true"},
                       "deletionTimestamp": "2026-12-01T00:00:00Z"}, "status": {"phase": "Terminating"}}
    alive = {"metadata": {"name": "llm", "labels": {NAMESPACE_LABEL: "true"}}, "status": {"phase": "Active"}}
    pod = _ready_pod_for_terminating_test()
    found = discover([ns], [(TARGET, [pod])], base=BASE)
    assert found.targets == [] and found.skipped == {"namespace_terminating": 1}
    [target] = discover([alive], [(TARGET, [pod])], base=BASE).targets
    assert recheck(pod, alive, target) is None
    assert recheck(pod, ns, target) == "its namespace is being deleted (Terminating)"


def _ready_pod_for_terminating_test() -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "llm", "uid": "u1",
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True, "uid": "r"}]},
            "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8000}]}]},
            "status": {"phase": "Running", "podIP": "10.1.2.3",
                       "conditions": [{"type": "Ready", "status": "True"}]}}


# -- tenants (issue 36 items 5 and 6) ---------------------------------------------------------------------------
TENANT = "capsule.clastix.io/tenant"


def labelled(name: str, **labels: str) -> dict[str, Any]:
    namespace = ns(name)
    namespace["metadata"]["labels"].update(labels)
    return namespace


def test_a_namespace_s_tenant_is_its_label_value_else_itself() -> None:
    assert tenant_of(labelled("x-dev", **{TENANT: "x"}), TENANT) == "capsule.clastix.io/tenant=x"
    assert tenant_of(labelled("team-b"), TENANT) == "team-b"  # without the label: its own tenant
    assert tenant_of(labelled("x-dev", **{TENANT: ""}), TENANT) == "x-dev"  # an empty value names no tenant
    assert tenant_of(labelled("x-dev", **{TENANT: "x"}), "") == "x-dev"  # tenantLabel unset: each its own
    # a label value equal to another namespace's name is still another tenant than that namespace
    assert tenant_of(labelled("a", **{TENANT: "b"}), TENANT) != tenant_of(labelled("b"), TENANT)


def test_discovery_gives_each_pod_its_namespace_s_tenant() -> None:
    namespaces = [labelled("x-dev", **{TENANT: "x"}), labelled("x-stage", **{TENANT: "x"}), labelled("team-b")]
    pods = [pod("a", namespace="x-dev"), pod("b", namespace="x-stage"), pod("c", namespace="team-b")]
    found = run(pods, namespaces, tenant_label=TENANT)
    assert {t.name: t.tenant for t in found.targets} == {"a": f"{TENANT}=x", "b": f"{TENANT}=x", "c": "team-b"}
    assert {t.name: t.tenant for t in run(pods, namespaces).targets} == {"a": "x-dev", "b": "x-stage", "c": "team-b"}


@pytest.mark.parametrize("tenant_label, taints", [(TENANT, False), ("", True)])
def test_node_escalation_needs_a_second_tenant_not_a_second_namespace(tenant_label: str, taints: bool) -> None:
    """Issue 36 item 6: stalled pods of one tenant's two namespaces on one node are one witness (tenantLabel set);
    each namespace its own tenant (unset), they are two, as before."""
    namespaces = [labelled("x-dev", **{TENANT: "x"}), labelled("x-stage", **{TENANT: "x"})]
    found = run([pod("a", namespace="x-dev"), pod("b", namespace="x-stage")], namespaces, tenant_label=tenant_label)
    history = NodeStallHistory(threshold=2, window_s=3600)
    assert [history.record("gpu-7", t.uid, 10.0, t.tenant) for t in found.targets] == [False, taints]
    assert history.record("gpu-7", "team-b-pod", 20.0, "team-b") is True  # another tenant's pod: a witness

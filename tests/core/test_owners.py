"""watchdog.core.owners: the fixed owner table, Kubernetes name validation, the owner path and the uid check."""

from __future__ import annotations

import pytest

from watchdog.core.model import OwnerRef
from watchdog.core.owners import OWNER_KINDS, owner_path, unresolvable, unverified, valid_name, valid_namespace

RS = OwnerRef("apps/v1", "ReplicaSet", "llm-5d4f", "u-1")


def test_the_table_holds_the_workload_kinds_and_nothing_cluster_scoped() -> None:
    assert set(OWNER_KINDS) == {("apps/v1", "ReplicaSet"), ("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"),
                                ("apps/v1", "DaemonSet"), ("batch/v1", "Job"), ("batch/v1", "CronJob")}
    assert owner_path("batch/v1", "CronJob", "ml", "nightly") == "/apis/batch/v1/namespaces/ml/cronjobs/nightly"
    assert owner_path("apps/v1", "ReplicaSet", "ml", "llm-5d4f") == "/apis/apps/v1/namespaces/ml/replicasets/llm-5d4f"


@pytest.mark.parametrize("name", ["llm", "llm-5d4f", "a.b-c.d", "0", "a" * 253, "x" * 63 + "." + "y" * 63])
def test_object_names(name: str) -> None:
    assert valid_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "a..b", "-a", "a-", "A", "a/b", "a?b", "a%2Fb", "a b", "a\nb",
                                  "a" * 254, "ａ", ".a", "a."])
def test_not_object_names(name: str) -> None:
    assert not valid_name(name)
    assert owner_path("apps/v1", "ReplicaSet", "ml", name) is None


def test_namespaces_are_labels() -> None:
    assert valid_namespace("tenant-a") and not valid_namespace("a.b") and not valid_namespace("a" * 64)
    assert not valid_namespace("") and owner_path("apps/v1", "ReplicaSet", "", "llm") is None


@pytest.mark.parametrize(("ref", "why"), [
    (OwnerRef("v1", "Node", "gpu-1", "u"), "not a kind"),
    (OwnerRef("apps/v1", "X/../../../api/v1/pods?probe=", "x", "u"), "not a kind"),
    (OwnerRef("apps/v1beta1", "ReplicaSet", "x", "u"), "not a kind"),
    (OwnerRef("apps/v1", "ReplicaSet", "../x", "u"), "not an object name"),
    (OwnerRef("apps/v1", "ReplicaSet", "x", ""), "no uid"),
])
def test_unresolvable(ref: OwnerRef, why: str) -> None:
    assert (unresolvable(ref, "ml") or "").startswith(why)
    assert unresolvable(RS, "ml") is None
    assert unresolvable(RS, "ML") == "not a namespace name"


def test_only_the_referenced_uid_verifies_an_owner() -> None:
    read = {"metadata": {"name": "llm-5d4f", "namespace": "ml", "uid": "u-1"}}
    assert unverified(read, RS, "ml") is None
    assert unverified(None, RS, "ml") == "not found"
    assert "uid" in (unverified({"metadata": {**read["metadata"], "uid": "u-2"}}, RS, "ml") or "")
    assert "uid" in (unverified({"metadata": {"name": "llm-5d4f", "namespace": "ml"}}, RS, "ml") or "")
    assert unverified({"metadata": {**read["metadata"], "namespace": "other"}}, RS, "ml") == "another object was read"
    assert unverified({"metadata": {**read["metadata"], "name": "llm"}}, RS, "ml") == "another object was read"
    assert "uid" in (unverified(read, OwnerRef("apps/v1", "ReplicaSet", "llm-5d4f", ""), "ml") or "")

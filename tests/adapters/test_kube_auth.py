"""Refused credentials (401/403) made visible, and a rotated token picked up: :mod:`watchdog.adapters.kubeauth`
alone and behind KubeClient, over real HTTP against a stand-in API server that checks bearer tokens
(tests/tokenapi.py; the kmock emulator authenticates nothing)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.config import incluster_config

from tests.tokenapi import CA, TokenApi
from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings
from watchdog.adapters.kubeauth import REFUSED_AFTER, Credentials
from watchdog.adapters.metrics import new_metrics


def told(creds: Credentials, *statuses: int) -> None:
    for s in statuses:
        creds.answered("list pods ''", s)


# --- the rule ------------------------------------------------------------------------------------------


def test_three_refusals_in_a_row_are_refused_credentials_until_one_is_accepted() -> None:
    now = [100.0]
    creds = Credentials(clock=lambda: now[0])
    assert REFUSED_AFTER == 3
    told(creds, 200, 401, 401)
    assert not creds.refused and creds.refusal() is None
    now[0] += 40
    told(creds, 401)
    assert creds.refused
    reason = creds.refusal()
    assert reason is not None and "\n" not in reason
    assert reason.startswith("the API server refuses this watchdog's credentials: its last 3 answers were HTTP "
                             "401 Unauthorized, none accepted for 40 s (last: 401 on list pods '')")
    assert "ServiceAccount token" in reason and "RBAC" in reason
    told(creds, 404)  # any answer but 401/403 and 5xx comes from an authenticated caller
    assert not creds.refused and creds.refusal() is None


def test_a_stray_403_on_an_optional_read_is_not_refused_credentials() -> None:
    """A ClusterRole without pods/log (or a DaemonSet in the owner walk): each remediation's other requests
    are accepted in between."""
    creds = Credentials()
    for _ in range(10):
        told(creds, 200, 200, 403, 200)  # GET pod, GET namespace, pods/log 403, DELETE
        assert not creds.refused
    told(creds, 403, 403)
    assert not creds.refused  # two in a row still are not
    told(creds, 403)
    reason = creds.refusal()
    assert reason is not None and "HTTP 403 Forbidden" in reason and "check RBAC" in reason


def test_no_answer_and_5xx_neither_count_nor_clear() -> None:
    creds = Credentials()
    told(creds, 401, 0, 503, 401, 500, 0)
    assert not creds.refused
    told(creds, 403)
    assert creds.refused  # mixed statuses count alike
    reason = creds.refusal()
    assert reason is not None and "HTTP 401 Unauthorized and 403 Forbidden" in reason
    told(creds, 500, 0)
    assert creds.refused


def test_the_metrics_hear_every_refusal_and_every_change_also_those_before_they_listened() -> None:
    creds = Credentials()
    told(creds, 401, 401)  # the informers' first LISTs, before the watchdog (and its metrics) exist
    m = new_metrics()
    creds.listen(m.on_credentials)

    def sample(name: str, **labels: str) -> float:
        value = m.registry.get_sample_value(name, labels)
        assert value is not None
        return value

    assert sample("vllm_watchdog_api_auth_failures_total", status="401") == 2
    assert sample("vllm_watchdog_api_credentials_refused") == 0
    told(creds, 403)
    assert sample("vllm_watchdog_api_auth_failures_total", status="403") == 1
    assert sample("vllm_watchdog_api_credentials_refused") == 1
    told(creds, 200)
    assert sample("vllm_watchdog_api_credentials_refused") == 0
    assert sample("vllm_watchdog_api_auth_failures_total", status="401") == 2


# --- behind KubeClient ---------------------------------------------------------------------------------


def test_the_client_tells_every_answer(caplog: pytest.LogCaptureFixture) -> None:
    with TokenApi("good") as api:
        kube = KubeClient.from_settings(KubeSettings(host=api.url, request_timeout_s=5))
        kube.credentials.refused_after = 3
        for _ in range(2):
            with pytest.raises(KubeError, match="HTTP 401 Unauthorized") as info:
                kube.list_pods("")
            assert info.value.status == 401
        assert not kube.credentials.refused
        with pytest.raises(KubeError):
            kube.get_pod("ml", "p")
        assert kube.credentials.refused
        assert "last: 401 on get pod ml/p" in (kube.credentials.refusal() or "")
        assert any(r.levelname == "ERROR" and "refuses this watchdog's credentials" in r.getMessage()
                   for r in caplog.records)
        api.accepted.add(None)  # the token is fixed
        api.forbidden.add("/api/v1/namespaces/ml/pods/p/log")  # pods/log not granted
        assert kube.list_pods("") == []
        assert not kube.credentials.refused
        for _ in range(3):  # a remediation's reads: the pod, its log (403), the pod again
            assert kube.get_pod("ml", "p") is not None
            with pytest.raises(KubeError, match="HTTP 403"):
                kube.read_pod_log("ml", "p", "vllm", 10, 1000)
        assert not kube.credentials.refused
        assert kube.credentials.counts == {401: 3, 403: 3}


def test_a_tenants_quota_refusing_event_creates_is_not_refused_credentials() -> None:
    """Fresh-eyes finding: a tenant filling a count/events ResourceQuota in its own namespace got every Event
    create there answered 403, which flagged the credentials as refused (/readyz 503, a false critical alert)."""
    with TokenApi("good") as api:
        kube = KubeClient.from_settings(KubeSettings(host=api.url, request_timeout_s=5))
        api.accepted.add(None)
        api.forbidden.add("/api/v1/namespaces/tenant/events")
        for _ in range(5):
            with pytest.raises(KubeError, match="HTTP 403"):
                kube.create_event("tenant", {"metadata": {"generateName": "x."}})
        assert not kube.credentials.refused and kube.credentials.counts == {401: 0, 403: 0}


def test_a_connection_error_is_not_a_refusal() -> None:
    kube = KubeClient.from_settings(KubeSettings(host="http://127.0.0.1:1", request_timeout_s=2))
    for _ in range(4):
        with pytest.raises(KubeError):
            kube.list_pods("")
    assert not kube.credentials.refused and kube.credentials.counts == {401: 0, 403: 0}


# --- a rotated token -----------------------------------------------------------------------------------


def test_in_cluster_a_rotated_token_file_is_read_at_the_first_401(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The client re-reads the token file on its own only once a minute: a token revoked and replaced in the
    file would be refused for up to that minute (every request of it). After a 401 it is read at once."""
    token = tmp_path / "token"
    token.write_text("one")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(CA))
    with TokenApi("one", tls=True) as api:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
        kube = KubeClient.from_settings(KubeSettings(request_timeout_s=5))
        assert kube.list_pods("") == []
        token.write_text("two")  # the kubelet writes the new projected token; the old one is revoked
        api.accepted = {"two"}
        with pytest.raises(KubeError, match="HTTP 401"):
            kube.list_pods("")
        assert kube.list_pods("") == [] and kube.list_namespaces("") == []
        assert api.tokens == ["one", "one", "two", "two"]
        assert kube.credentials.reloads == 1 and not kube.credentials.refused


def kubeconfig(path: Path, server: str, user: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return path


EXEC_PLUGIN = """import json, pathlib, sys
token = pathlib.Path(sys.argv[1]).read_text()
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": token, "expirationTimestamp": "2999-01-01T00:00:00Z"}}))
"""


@pytest.mark.parametrize("how", ["token", "tokenFile", "exec"])
def test_with_a_kubeconfig_a_changed_token_is_read_at_the_first_401(tmp_path: Path, how: str) -> None:
    """The client reads a kubeconfig's token and tokenFile once, and runs an exec plugin again only once its
    token expired: a token replaced there was refused until a restart. After a 401 the kubeconfig is loaded
    again."""
    token_file, plugin = tmp_path / "token", tmp_path / "plugin.py"
    token_file.write_text("one")
    plugin.write_text(EXEC_PLUGIN)
    users = {"token": lambda t: {"token": t}, "tokenFile": lambda t: {"tokenFile": str(token_file)},
             "exec": lambda t: {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                                         "args": [str(plugin), str(token_file)], "interactiveMode": "Never"}}}
    with TokenApi("one") as api:
        path = kubeconfig(tmp_path / "config", api.url, users[how]("one"))
        kube = KubeClient.from_settings(KubeSettings(kubeconfig=str(path), request_timeout_s=5))
        assert kube.list_pods("") == []
        token_file.write_text("two")
        kubeconfig(path, api.url, users[how]("two"))
        api.accepted = {"two"}
        with pytest.raises(KubeError, match="HTTP 401"):
            kube.list_pods("")
        assert kube.list_pods("") == []
        assert api.tokens == ["one", "one", "two"]
        assert kube.credentials.reloads == 1


def test_a_reload_is_rate_limited_and_never_drops_the_token(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    live = client.Configuration()
    live.api_key = {"BearerToken": "Bearer one"}
    fresh: list[dict[str, str]] = [{"BearerToken": "Bearer one"}]
    loads: list[float] = []

    def load() -> client.Configuration:
        loads.append(now[0])
        cfg = client.Configuration()
        cfg.api_key = dict(fresh[0])
        return cfg

    creds = Credentials(live, clock=lambda: now[0])
    creds.reload_with(load)
    told(creds, 401, 401)  # the same token: loaded once, nothing changes
    assert loads == [0.0] and live.api_key == {"BearerToken": "Bearer one"}
    now[0] = 11.0
    fresh[0] = {}  # an exec plugin failing: the client's loader logs it and leaves no token
    told(creds, 401)
    assert loads == [0.0, 11.0] and live.api_key == {"BearerToken": "Bearer one"}
    assert any("carry no token" in r.getMessage() for r in caplog.records)
    now[0] = 22.0
    fresh[0] = {"BearerToken": "Bearer two"}
    told(creds, 403)  # a 403 is RBAC: a new token would not help
    assert loads == [0.0, 11.0]
    told(creds, 401)
    assert live.api_key == {"BearerToken": "Bearer two"} and creds.reloads == 1

"""``/readyz`` and the metrics while the API server refuses the watchdog's credentials (issue 27): in process with a
cycle completing from a cache, and through ``run`` against a stand-in API server that refuses its token
(tests/tokenapi.py)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import builders
import pytest
from run_kit import get, rest_of, serving_address, start_run

from tests.tokenapi import TokenApi
from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings
from watchdog.config.loader import load_config
from watchdog.controller import http
from watchdog.core.model import NAMESPACE_LABEL
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, write_config


class Cached:
    """The watch cache's part in the incident: namespaces and pods served from memory, so cycles complete while
    every API request is refused."""

    def __init__(self, kube: KubeClient) -> None:
        self.namespaces, self.pods = kube.list_namespaces(""), kube.list_pods("")

    def list_namespaces(self, label_selector: str) -> list[dict[str, Any]]:
        return self.namespaces

    def list_pods(self, label_selector: str, namespaces: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        return self.pods

    def keep_pods_of(self, namespaces: Collection[str]) -> None:
        pass

    def close(self) -> None:
        pass


def test_readyz_is_503_naming_refused_credentials_while_cycles_complete(emulator: EmulatorServer,
                                                                        tmp_path: Path) -> None:
    """Issue 27: with the token revoked, cycles kept completing from the cache and /readyz said 200. Now three
    refusals in a row, none accepted since, make it 503 with a reason naming the 401 and what to check; the
    first accepted answer makes it ready again. Liveness does not depend on the API server."""
    emulator.create_namespace("inference", {NAMESPACE_LABEL: "true"})
    config = load_config(str(write_config(tmp_path / "config.yaml", **FAST_SETTINGS)), env={})
    kube = KubeClient.from_settings(KubeSettings(host=emulator.base_url))
    wd = builders.watchdog(config, kube, listing=Cached(kube))
    server = http.start_http("127.0.0.1:0", wd, 1.0, refusal=kube.credentials.refusal)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    cfg: Any = kube._api.configuration  # host mode: no loader resets it
    try:
        wd.run_cycle()
        assert get(base, "/readyz")[0] == 200
        with TokenApi() as revoked:  # accepts no token at all
            cfg.host = revoked.url
            for _ in range(3):  # the informers' LIST/WATCH, the brake's GET, a Lease renewal ...
                with pytest.raises(KubeError, match="HTTP 401"):
                    kube.get_pod("inference", "p")
            wd.run_cycle()  # from the cache: completes
            status, _, body = get(base, "/readyz")
            assert status == 503
            reply = json.loads(body)
            assert reply["ready"] is False and reply["seconds_since_completed"] < 1
            assert reply["why"].startswith("the API server refuses this watchdog's credentials: its last 3 answers "
                                           "were HTTP 401 Unauthorized")
            assert "ServiceAccount token" in reply["why"] and "RBAC" in reply["why"]
            assert get(base, "/healthz")[0] == 200
        cfg.host = emulator.base_url  # a new token
        wd.run_cycle()
        assert get(base, "/readyz")[0] == 503  # nothing asked the API server yet
        assert kube.get_pod("inference", "p") is None  # a 404 is an accepted answer
        assert get(base, "/readyz")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
        wd.close()


@pytest.mark.e2e  # a `watchdog` process of its own
def test_run_with_refused_credentials_is_not_ready_counts_them_and_stays_alive(tmp_path: Path) -> None:
    """The same through ``run``: the token of the kubeconfig is refused; /readyz says so, the metrics count the
    refusals and raise the gauge the alert reads (VllmWatchdogApiCredentialsRefused)."""
    config = write_config(tmp_path / "config.yaml", **FAST_SETTINGS)
    with TokenApi("the-new-one") as api:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": api.url}}],
            "users": [{"name": "u", "user": {"token": "revoked"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        with start_run("--kubeconfig", str(kubeconfig), "--config", str(config)) as (proc, lines):
            base = f"http://{serving_address(lines)}"
            deadline = time.monotonic() + 20
            while "refuses" not in (why := json.loads(get(base, "/readyz")[2]).get("why", "")):
                assert time.monotonic() < deadline, why
                time.sleep(0.1)
            assert get(base, "/readyz")[0] == 503 and "401 Unauthorized" in why
            assert get(base, "/healthz")[0] == 200
            exposed = get(base, "/metrics")[2].decode().splitlines()
            assert "vllm_watchdog_api_credentials_refused 1.0" in exposed
            counted = 'vllm_watchdog_api_auth_failures_total{status="401"}'
            [failures] = [line for line in exposed if line.startswith(counted)]
            assert float(failures.split()[-1]) >= 3
            assert 'vllm_watchdog_api_auth_failures_total{status="403"} 0.0' in exposed
            assert set(api.tokens) == {"revoked"}
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
    rest = rest_of(lines)
    assert not any("Traceback" in line for line in rest)

"""The chart installed with real ``helm install`` and the watchdog process running as its ServiceAccount.

The watchdog is ``python -m watchdog run`` in a subprocess with the ConfigMap the chart rendered (read back from
the API server) as its ``--config`` and a kubeconfig holding a TokenRequest token (``kubectl create token``) of
the chart's ServiceAccount, so the chart's RBAC is exactly what the API server enforces. Only what a loopback
world needs is set through ``WATCHDOG_*`` variables (:data:`LOOPBACK_ENV`, the listen address); callers add
their timings.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from watchdog.demo.controlplane.api import free_port, stop_process, tool_env, wait_for
from watchdog.demo.controlplane.locate import chart_dir, checkout
from watchdog.demo.controlplane.plane import ControlPlane, die_with_parent

# The simulated engines listen on 127.10.x.y (the pods' status.podIP). The watchdog refuses loopback pod IPs
# (an SSRF rule) unless this setting is on; it is meant for this loopback world (demo and tests) only.
LOOPBACK_ENV = {"WATCHDOG_ALLOW_LOOPBACK_POD_IPS": "true", "WATCHDOG_LOG_FORMAT": "text"}
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ToolFailed(RuntimeError):
    """kubectl or helm exited non-zero (the message carries its output)."""


def run_tool(args: list[str], *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=tool_env())
    if check and done.returncode != 0:
        raise ToolFailed(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def kubectl_out(kubectl: str, plane: ControlPlane, *args: str, check: bool = True) -> str:
    """``kubectl --kubeconfig <admin> ARGS``: its stdout and stderr."""
    done = run_tool([kubectl, "--kubeconfig", str(plane.admin_kubeconfig), *args], check=check)
    return done.stdout + done.stderr


@dataclass
class Release:
    """A ``helm install`` of the chart; ``config_yaml`` is the ConfigMap's config.yaml as stored in the API."""

    name: str
    namespace: str
    values: dict[str, Any]
    fullname: str = ""
    service_account: str = ""
    config_yaml: str = ""
    token: str = ""

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    @property
    def config(self) -> dict[str, Any]:
        return dict(yaml.safe_load(self.config_yaml))


def install_release(plane: ControlPlane, helm: str, kubectl: str, name: str, namespace: str,
                    values: dict[str, Any], work: Path, chart: Path | None = None) -> Release:
    """``helm install`` (replicaCount 0: no watchdog pod; the watchdog runs here as the chart's
    ServiceAccount), then read back the ConfigMap and the ServiceAccount, and mint a token (TokenRequest)."""
    assert plane.api is not None
    values_file = work / f"values-{name}.yaml"
    values_file.write_text(yaml.safe_dump({"replicaCount": 0, **values}))
    run_tool([helm, "install", name, str(chart or chart_dir()), "--namespace", namespace, "--create-namespace",
              "--kubeconfig", str(plane.admin_kubeconfig), "-f", str(values_file)], timeout=120)
    release = Release(name, namespace, values)
    selector = f"app.kubernetes.io/instance={name}"
    maps = plane.api.get(f"/api/v1/namespaces/{namespace}/configmaps", labelSelector=selector)["items"]
    if len(maps) != 1:
        raise ToolFailed(f"helm install {name}: expected one ConfigMap labelled {selector}, found {len(maps)}")
    release.fullname = maps[0]["metadata"]["name"]
    release.config_yaml = maps[0]["data"]["config.yaml"]
    accounts = plane.api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts", labelSelector=selector)["items"]
    if len(accounts) != 1:
        raise ToolFailed(f"helm install {name}: expected one ServiceAccount labelled {selector}, "
                         f"found {len(accounts)}")
    release.service_account = accounts[0]["metadata"]["name"]
    release.token = run_tool([kubectl, "--kubeconfig", str(plane.admin_kubeconfig), "create", "token",
                              release.service_account, "-n", namespace, "--duration", "2h"]).stdout.strip()
    return release


class WatchdogProcess:
    """``python -m watchdog run`` as the release's ServiceAccount, logging to ``log_path``; :meth:`start` /
    :meth:`stop`. ``env`` (timings, a namespace selector, ...) goes on top of :data:`LOOPBACK_ENV`."""

    def __init__(self, plane: ControlPlane, release: Release, work: Path, name: str,
                 env: dict[str, str] | None = None) -> None:
        self.plane, self.release, self.name = plane, release, name
        self.work = work / name
        self.work.mkdir(parents=True, exist_ok=True)
        self.config = self.work / "config.yaml"
        self.config.write_text(release.config_yaml)
        self.kubeconfig = plane.write_kubeconfig(self.work / "kubeconfig", release.token, release.service_account)
        self.port = free_port()
        self.log_path = self.work / "watchdog.log"
        self.env = {
            **tool_env(), "PYTHONUNBUFFERED": "1", **LOOPBACK_ENV,
            "POD_NAMESPACE": release.namespace,  # as the chart's downward API sets it
            "WATCHDOG_PAUSE_CONFIG_MAP": release.fullname,  # the run-time brake, as the chart's Deployment sets it
            "WATCHDOG_LISTEN_ADDRESS": f"127.0.0.1:{self.port}",
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @property
    def argv(self) -> list[str]:
        return [sys.executable, "-m", "watchdog", "run", "--config", str(self.config), "--kubeconfig",
                str(self.kubeconfig)]

    def start(self, ready_timeout: float = 30) -> WatchdogProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, cwd=checkout(), preexec_fn=die_with_parent)
        self.started_at = time.monotonic()
        wait_for(f"watchdog {self.name} /readyz", self._ready, timeout=ready_timeout,
                 describe=lambda: self.log()[-3000:])
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"watchdog {self.name} exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        try:
            with _NO_PROXY.open(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def stop(self) -> int | None:
        return stop_process(self.proc)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def metrics(self) -> str:
        with _NO_PROXY.open(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

"""etcd, kube-apiserver and kube-controller-manager on loopback (built by ``make control-plane``, located by
:mod:`.locate`).

- etcd: a temporary data dir, client and peer URLs on 127.0.0.1 (free ports), no fsync (throwaway data).
- kube-apiserver: secure port on 127.0.0.1 with a self-signed serving certificate (``--cert-dir``), RBAC
  authorization, a service-account issuer and an RSA key pair made with ``openssl``, a static-token admin in
  ``system:masters`` (the harness, kubectl and helm), ``--service-cluster-ip-range`` as an allocation range only
  (nothing is ever sent there), no endpoint reconciler (its endpoint would be a loopback address, which the API
  refuses in Endpoints), and an audit log of every request a ServiceAccount makes (:func:`audit` reads it: the
  exact DELETE/eviction bodies and which RBAC grants were used).
- kube-controller-manager: only the controllers the demo and the tests need, no leader election, admin
  kubeconfig.

Nothing listens on or talks to anything but 127.0.0.0/8. Each process logs to a file and gets SIGTERM when
the process that started it dies; a start-up failure raises :class:`ControlPlaneError` with the tail of every log.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import requests
import yaml

from watchdog.demo.controlplane.api import Api, free_port, stop_process, wait_for

# Allocation ranges for ClusterIPs only; no packet is ever sent there. Dual-stack so that a scenario can make an
# IPv6 headless Service, whose EndpointSlices take the ULA second pod IP of a gated pod (a loopback one is refused).
SERVICE_CIDR = "10.96.0.0/16,fd00:96::/112"
# Names as `kube-controller-manager --help` lists them (v1.35).
CONTROLLERS = ("deployment-controller", "replicaset-controller", "garbage-collector-controller",
               "disruption-controller", "endpointslice-controller", "serviceaccount-controller",
               "serviceaccount-token-controller", "namespace-controller", "statefulset-controller")

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        # Writes by ServiceAccounts (the watchdog) with their request bodies (DeleteOptions with preconditions,
        # Eviction, Event, Lease, Node patch); reads by ServiceAccounts as metadata only.
        {"level": "Request", "userGroups": ["system:serviceaccounts"],
         "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}


class ControlPlaneError(RuntimeError):
    """The control plane could not be started (the message carries the processes' log tails)."""


def die_with_parent() -> None:
    """In a child before exec (Linux): SIGTERM when the starting process dies, even by SIGKILL or a CI timeout,
    so no control plane or watchdog outlives the demo or test session that started it."""
    with contextlib.suppress(Exception):
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1


def which_openssl() -> str | None:
    return shutil.which("openssl")


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def kubeconfig_file(path: Path, server: str, ca_file: Path, user: dict[str, str], user_name: str,
                    cluster: str) -> Path:
    """A kubeconfig (mode 0600) for the API server at ``server`` (``ca_file`` inline) as ``user`` (a token or a
    client certificate and key): this control plane's and the real node's (:mod:`watchdog.demo.node.kit`)."""
    ca = base64.b64encode(ca_file.read_bytes()).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user_name}}],
    }))
    path.chmod(0o600)
    return path


def timed_start(start: Callable[[], None], log_report: Callable[[], str], stop: Callable[[], None],
                error: type[Exception], *wrapped: type[BaseException]) -> float:
    """Run ``start`` and return how many seconds it took. When it fails, ``stop`` undoes what it started; a failure
    that is an ``error`` or one of ``wrapped`` is raised again as ``error`` with ``log_report()`` (the processes'
    log tails, read before stopping) appended."""
    t0 = time.monotonic()
    try:
        start()
    except BaseException as exc:
        report = log_report()
        stop()
        if isinstance(exc, (error, *wrapped)):
            raise error(f"{exc}\n{report}") from exc
        raise
    return time.monotonic() - t0


def apiserver_files(work: Path) -> tuple[str, Path, Path, Path]:
    """A fresh admin token, the token file naming it (``system:masters``, mode 0600), the :data:`AUDIT_POLICY` file
    and where the audit log goes, all in ``work``: kube-apiserver's ``--token-auth-file``, ``--audit-policy-file``
    and ``--audit-log-path``."""
    token = secrets.token_hex(24)
    tokens = work / "tokens.csv"
    tokens.write_text(f'{token},cluster-admin,cluster-admin-uid,"system:masters"\n')
    tokens.chmod(0o600)
    policy = work / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    return token, tokens, policy, work / "audit.log"


def spawn(procs: dict[str, subprocess.Popen[bytes]], logs: dict[str, Path], work: Path, name: str,
          argv: list[str]) -> None:
    """Start ``argv`` as ``name`` (in ``procs``), its output to ``work/<name>.log`` (in ``logs``), in a session of
    its own, stopped by SIGTERM when the starting process dies (:func:`die_with_parent`)."""
    log = work / f"{name}.log"
    logs[name] = log
    with open(log, "wb") as out:
        procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, preexec_fn=die_with_parent)


def running(procs: dict[str, subprocess.Popen[bytes]], name: str, error: type[Exception]) -> bool:
    """True while ``name`` runs; ``error`` naming its exit status once it has exited (ends a wait at once)."""
    proc = procs[name]
    if proc.poll() is not None:
        raise error(f"{name} exited with {proc.returncode}")
    return True


def process_report(procs: dict[str, subprocess.Popen[bytes]], logs: dict[str, Path], lines: int) -> str:
    """Each started process's state and the last ``lines`` lines of its log."""
    parts = []
    for name, path in logs.items():
        proc = procs.get(name)
        state = "running" if proc is not None and proc.poll() is None else f"exited {proc.returncode if proc else '?'}"
        parts.append(f"--- {name} ({state}), last {lines} lines of {path}:\n{_tail(path, lines)}")
    return "\n".join(parts)


def read_audit(path: Path) -> list[dict[str, Any]]:
    """Every event of a JSON audit log so far (lines that do not parse, e.g. one being written, are skipped)."""
    out = []
    with contextlib.suppress(FileNotFoundError), open(path) as handle:
        for line in handle:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


@dataclass
class ControlPlane:
    """Start with :meth:`start` (or as a context manager); ``api`` is the admin client once started."""

    bin_dir: Path
    work: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    base_url: str = ""
    admin_token: str = ""
    ca_file: Path = Path()
    sa_key: Path = Path()
    audit_log: Path = Path()
    admin_kubeconfig: Path = Path()
    api: Api | None = None
    start_seconds: float = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> ControlPlane:
        self.start_seconds = timed_start(self._start, self.log_report, self.stop, ControlPlaneError, AssertionError)
        return self

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            stop_process(self.procs.get(name), 15)

    def _start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self._spawn("etcd", [
            "--name", "cluster-tier", "--data-dir", str(self.work / "etcd-data"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"cluster-tier=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])
        self._wait_http("etcd", f"http://127.0.0.1:{etcd_port}/health", timeout=30)

        self.sa_key, sa_pub = self.work / "sa.key", self.work / "sa.pub"
        subprocess.run(["openssl", "genrsa", "-out", str(self.sa_key), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(self.sa_key), "-pubout", "-out", str(sa_pub)], check=True,
                       capture_output=True)
        self.admin_token, tokens, policy, self.audit_log = apiserver_files(self.work)
        cert_dir = self.work / "certs"
        self.base_url = f"https://127.0.0.1:{api_port}"
        self._spawn("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
            f"--cert-dir={cert_dir}",
            f"--service-account-key-file={sa_pub}", f"--service-account-signing-key-file={self.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=RBAC", f"--token-auth-file={tokens}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--endpoint-reconciler-type=none",
            f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--profiling=false", "--v=1",
        ])
        self.ca_file = cert_dir / "apiserver.crt"  # self-signed: the serving certificate followed by its CA
        wait_for("kube-apiserver's self-signed certificate", self.ca_file.is_file, timeout=60,
                 describe=lambda: self._exited("kube-apiserver"))
        self.api = Api(self.base_url, self.admin_token, self.ca_file)
        assert self.api is not None
        api = self.api
        wait_for("kube-apiserver /readyz", lambda: self._alive("kube-apiserver") and
                 api.request("GET", "/readyz", ok=(500, 503))[0] == 200, timeout=90)
        self.admin_kubeconfig = self.write_kubeconfig(self.work / "admin.kubeconfig", self.admin_token, "admin")

        self._spawn("kube-controller-manager", [
            f"--kubeconfig={self.admin_kubeconfig}",
            "--leader-elect=false", f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={self.sa_key}", f"--root-ca-file={self.ca_file}",
            "--secure-port=0",  # no serving at all: nothing scrapes the manager here
            "--concurrent-deployment-syncs=5", "--concurrent-replicaset-syncs=5",
            "--profiling=false", "--v=1",
        ])
        # The serviceaccount controller creates "default" in every namespace: proof the manager is working.
        wait_for("kube-controller-manager (ServiceAccount default/default)",
                 lambda: self._alive("kube-controller-manager") and
                 api.find("/api/v1/namespaces/default/serviceaccounts/default"), timeout=60)

    def _spawn(self, name: str, args: list[str]) -> None:
        spawn(self.procs, self.logs, self.work, name, [str(self.bin_dir / name), *args])

    def _alive(self, name: str) -> bool:
        return running(self.procs, name, ControlPlaneError)

    def _exited(self, name: str) -> str:
        proc = self.procs.get(name)
        return "" if proc is None or proc.poll() is None else f"{name} exited with {proc.returncode}"

    def _wait_http(self, name: str, url: str, timeout: float) -> None:
        session = requests.Session()
        session.trust_env = False
        wait_for(f"{name} at {url}", lambda: self._alive(name) and session.get(url, timeout=2).ok, timeout=timeout)

    # -- helpers -----------------------------------------------------------------------------------------------
    def write_kubeconfig(self, path: Path, token: str, user: str) -> Path:
        """A kubeconfig for this API server (its CA inline) authenticating with bearer ``token``."""
        return kubeconfig_file(path, self.base_url, self.ca_file, {"token": token}, user, "cluster-tier")

    def log_report(self, lines: int = 30) -> str:
        return process_report(self.procs, self.logs, lines)

    def audit_events(self) -> list[dict[str, Any]]:
        """Every audit event logged so far (ServiceAccount requests only, see AUDIT_POLICY)."""
        return read_audit(self.audit_log)

class Audited(Protocol):
    """A control plane whose API server writes an audit log (:class:`ControlPlane`, the real node's ``Node``)."""

    def audit_events(self) -> list[dict[str, Any]]: ...


def audit(plane: Audited, user: str, *, verb: str | None = None, resource: str | None = None,
          subresource: str | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
    """Audit events (stage ResponseComplete) of requests ``user`` made, filtered."""
    wanted = {"verb": verb, "resource": resource, "subresource": subresource, "namespace": namespace}
    out = []
    for event in plane.audit_events():
        if event.get("stage") != "ResponseComplete" or event["user"].get("username") != user:
            continue
        ref = {**(event.get("objectRef") or {}), "verb": event.get("verb")}
        if all(value is None or ref.get(key) == value for key, value in wanted.items()):
            out.append(event)
    return out

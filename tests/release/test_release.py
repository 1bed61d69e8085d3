"""The release, end to end, against a real registry on loopback: ``tests/release/release.py`` (what
``make release REGISTRY=...`` runs) pushes the image and the packaged chart; then the registry's own answers and
a ``helm install`` by name (``oci://127.0.0.1:PORT/charts/vllm-stall-watchdog --version V``, client-side dry run,
no cluster) say the chart installs exactly the pushed image, by digest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import tools
import yaml
from registry_kit import REUSE_STALE, Registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from release import NAME, the_version

pytestmark = pytest.mark.release

RELEASE = Path(__file__).resolve().parent / "release.py"
MANIFEST_TYPES = ", ".join(("application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json",
                            "application/vnd.docker.distribution.manifest.list.v2+json"))


def isolated_env(tmp_path: Path) -> dict[str, str]:
    """helm's config, cache and data (registry logins, pulled charts) in the test's directory; no kubeconfig."""
    env = dict(os.environ)
    for key in ("HELM_CONFIG_HOME", "HELM_CACHE_HOME", "HELM_DATA_HOME"):
        env[key] = str(tmp_path / key.lower())
    env["KUBECONFIG"] = str(tmp_path / "no-kubeconfig")
    return env


def run_release(registry: Registry, env: dict[str, str], summary: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(RELEASE), "--registry", registry.address, "--no-build", "--summary", str(summary)]
    if REUSE_STALE:
        cmd.append("--reuse-stale-archive")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)


def manifest_digest(address: str, repository: str, tag: str) -> str:
    """The registry's Docker-Content-Digest for ``repository:tag`` (HEAD /v2/<name>/manifests/<tag>)."""
    request = urllib.request.Request(f"http://{address}/v2/{repository}/manifests/{tag}", method="HEAD",
                                     headers={"Accept": MANIFEST_TYPES})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.headers["Docker-Content-Digest"])


def deployment(manifests: str) -> dict[str, Any]:
    (found,) = [d for d in yaml.safe_load_all(manifests) if d and d.get("kind") == "Deployment"]
    return dict(found)


def test_release_then_install_by_name_runs_the_pushed_digest(registry: Registry, tmp_path: Path) -> None:
    env = isolated_env(tmp_path)
    version = the_version()
    summary = tmp_path / "summary.json"
    t0 = time.monotonic()
    done = run_release(registry, env, summary)
    release_s = time.monotonic() - t0
    assert done.returncode == 0, f"{done.stderr[-4000:]}\n--- registry log ---\n{registry.log_tail()}"
    print(done.stdout)
    pushed = json.loads(summary.read_text())
    assert pushed["plain_http"] == "true"  # loopback, plain HTTP: said so, and only then

    # The registry's own word on what it holds, asked two ways.
    image_digest = manifest_digest(registry.address, NAME, version)
    assert image_digest == pushed["image_digest"]
    inspected = json.loads(subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", f"docker://{registry.address}/{NAME}:{version}"],
        capture_output=True, text=True, check=True, timeout=120).stdout)
    assert inspected["Digest"] == image_digest
    assert inspected["Labels"]["org.opencontainers.image.version"] == version
    chart_digest = manifest_digest(registry.address, f"charts/{NAME}", version)
    assert chart_digest == pushed["chart_digest"]

    # Installed by name: the chart's metadata, and the pod runs exactly the pushed image.
    chart_ref = f"oci://{registry.address}/charts/{NAME}"
    helm = tools.helm()
    shown = yaml.safe_load(subprocess.run([helm, "show", "chart", chart_ref, "--version", version, "--plain-http"],
                                          capture_output=True, text=True, check=True, env=env, timeout=120).stdout)
    assert (shown["name"], str(shown["version"]), str(shown["appVersion"])) == (NAME, version, version)
    installed = subprocess.run([helm, "install", NAME, chart_ref, "--version", version, "--plain-http",
                                "--namespace", NAME, "--dry-run=client"],
                               capture_output=True, text=True, env=env, timeout=120)
    assert installed.returncode == 0, installed.stderr
    rendered = installed.stdout.split("\nMANIFEST:\n", 1)[1].split("\nNOTES:\n", 1)[0]
    (container,) = deployment(rendered)["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{registry.address}/{NAME}@{image_digest}"
    assert "bare name" not in installed.stdout  # the NOTES' placeholder-image warning is not printed

    # The same version again is refused: a released version is never silently replaced.
    again = run_release(registry, env, tmp_path / "again.json")
    assert again.returncode == 1 and "already in the registry" in again.stderr, again.stderr[-2000:]
    assert manifest_digest(registry.address, NAME, version) == image_digest
    print(f"release tier: release {release_s:.1f} s ({pushed['archive_how']}); image {pushed['image']}; "
          f"chart {chart_ref}:{version} {chart_digest}")

"""Release the watchdog into an OCI registry: the image and the packaged chart, installable by name.

    python tests/release/release.py --registry HOST:PORT[/PATH]          # what `make release REGISTRY=...` runs

1. The version: pyproject.toml's ``[project] version``, ``watchdog.__version__``, Chart.yaml's ``version`` and
   ``appVersion`` and the Dockerfile's version label must be one string (:func:`versions`); the release refuses
   to start when they drift.
2. The image: the newest watchdog OCI archive newer than its inputs (``watchdog.demo.node.images.watchdog_archive``:
   ``.cache/image/`` or ``.cache/node/``, older than any of the Dockerfile, tests/image/oci_archive.py,
   pyproject.toml, README.md or a watchdog/ source but the demo is stale), else a fresh one built by
   ``tests/image/oci_archive.py`` (root, mmdebstrap, ~5 min cold). Its ``org.opencontainers.image.version`` label
   must be the version. ``skopeo copy oci-archive:... docker://REGISTRY/vllm-stall-watchdog:VERSION``; the
   registry's manifest digest is what skopeo wrote (``--digestfile``).
3. The chart: a copy of helm/vllm-stall-watchdog whose values.yaml says ``image.repository:
   REGISTRY/vllm-stall-watchdog``, ``image.tag: VERSION`` and ``image.digest: sha256:...`` (the chart renders
   ``repository@digest`` when a digest is set: the installed pod runs exactly the pushed image), ``helm package``
   and ``helm push`` to ``oci://REGISTRY/charts``: ``oci://REGISTRY/charts/vllm-stall-watchdog --version VERSION``.

TLS: a registry on a loopback address (127.0.0.0/8, ::1, localhost) that answers plain HTTP with the distribution
API header is talked to over plain HTTP (skopeo ``--dest-tls-verify=false``, helm ``--plain-http``) and the script
says so; any other registry over verified HTTPS only. Credentials are skopeo's and helm's own (``skopeo login``,
``helm registry login``). An already released chart version is refused (bump the version) unless
``--overwrite`` (``make release OVERWRITE=1``).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # tests/tools.py

import tools  # noqa: E402

from watchdog.demo.node.images import IMAGE_ARCHIVE, watchdog_archive  # noqa: E402

CHART_DIR = REPO / "helm" / "vllm-stall-watchdog"
NAME = "vllm-stall-watchdog"  # the image's and the chart's name in the registry


class ReleaseError(Exception):
    """One line saying what stopped the release (and what to do)."""


def versions() -> dict[str, str]:
    """Every place the version is written, by name. They are one version: a release refuses to start otherwise,
    and tests/release/test_versions.py fails."""
    init = re.search(r'^__version__ = "([^"]+)"$', (REPO / "watchdog" / "__init__.py").read_text(), re.M)
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    label = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', (REPO / "Dockerfile").read_text())
    return {
        "pyproject.toml [project] version": tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"],
        "watchdog/__init__.py __version__": init[1] if init else "(not found)",
        "Chart.yaml version": str(chart["version"]),
        "Chart.yaml appVersion": str(chart["appVersion"]),
        "Dockerfile org.opencontainers.image.version": label[1] if label else "(not found)",
    }


def the_version() -> str:
    found = versions()
    if len(set(found.values())) != 1:
        raise ReleaseError("the version is written differently in "
                           + ", ".join(f"{where}={value}" for where, value in found.items()) + ": make them one")
    return next(iter(found.values()))


def run(*cmd: str, quiet: bool = False) -> str:
    """Run ``cmd``; its stdout and stderr together. A failure is a :class:`ReleaseError` with its output."""
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    out = done.stdout + done.stderr
    if done.returncode != 0:
        raise ReleaseError(f"{cmd[0]} exited {done.returncode}: {out.strip()[-2000:]}")
    if not quiet and out.strip():
        print(out.rstrip(), file=sys.stderr, flush=True)
    return out


def registry_host(registry: str) -> str:
    if "://" in registry or not registry or registry.endswith("/"):
        raise ReleaseError(f"REGISTRY is host[:port][/path] without a scheme or a trailing slash, not {registry!r}")
    return registry.split("/", 1)[0]


def is_loopback(host: str) -> bool:
    name = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def plain_http_on_loopback(host: str) -> bool:
    """True only when ``host`` is a loopback address whose /v2/ answers plain HTTP as a distribution registry."""
    if not is_loopback(host):
        return False
    request = urllib.request.Request(f"http://{host}/v2/", method="GET")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:  # loopback only, by the check above
            headers = answer.headers
    except urllib.error.HTTPError as error:  # 401 from a registry with auth; 400 from a TLS port spoken to in HTTP
        headers = error.headers
    except OSError:
        return False
    return str(headers.get("Docker-Distribution-API-Version", "")).startswith("registry/2")


def find_archive(version: str, reuse_stale: bool, build: bool) -> tuple[Path, str]:
    """(archive, how it was chosen): one newer than its inputs, else (``reuse_stale``) the newest, else built."""
    fresh = watchdog_archive(fresh_only=True)
    if fresh is not None:
        return fresh, "newer than its inputs, reused"
    stale = watchdog_archive(fresh_only=False) if reuse_stale else None
    if stale is not None:
        return stale, "OLDER than its inputs (--reuse-stale-archive): it may not carry the checkout's sources"
    if not build:
        raise ReleaseError("no watchdog OCI archive newer than its inputs (.cache/image/, .cache/node/): build one "
                           "with `sudo .venv/bin/python tests/image/oci_archive.py` (or --reuse-stale-archive)")
    t0 = time.monotonic()
    run(sys.executable, str(REPO / "tests" / "image" / "oci_archive.py"), str(IMAGE_ARCHIVE), quiet=True)
    return IMAGE_ARCHIVE, f"built by tests/image/oci_archive.py in {time.monotonic() - t0:.0f} s"


def archive_version(archive: Path) -> str:
    config = json.loads(run("skopeo", "inspect", "--config", f"oci-archive:{archive}", quiet=True))
    return str(config["config"].get("Labels", {}).get("org.opencontainers.image.version", "(no version label)"))


def set_image_values(values: str, settings: dict[str, str]) -> str:
    """values.yaml's text with the keys of its top-level ``image:`` block set (comments kept)."""
    lines = values.splitlines(keepends=True)
    start = lines.index("image:\n")
    for key, value in settings.items():
        for i in range(start + 1, len(lines)):
            if lines[i].strip() and not lines[i].startswith(" "):
                raise ReleaseError(f"values.yaml: no image.{key} line to set")
            if lines[i].startswith(f"  {key}:"):
                lines[i] = f"  {key}: {json.dumps(value)}\n"
                break
    text = "".join(lines)
    image = yaml.safe_load(text)["image"]
    if any(image.get(key) != value for key, value in settings.items()):
        raise ReleaseError(f"values.yaml: image is {image} after setting {settings}")
    return text


def package_chart(work: Path, image: dict[str, str]) -> Path:
    chart = work / "chart" / NAME
    shutil.copytree(CHART_DIR, chart)
    values = chart / "values.yaml"
    values.write_text(set_image_values(values.read_text(), image))
    out = work / "packaged"
    run(tools.helm(), "lint", "--strict", str(chart))
    run(tools.helm(), "package", str(chart), "--destination", str(out))
    (package,) = out.glob("*.tgz")
    return package


def release(registry: str, *, reuse_stale: bool = False, build: bool = True, overwrite: bool = False) -> dict[str, str]:
    t0 = time.monotonic()
    version = the_version()
    host = registry_host(registry)
    plain = plain_http_on_loopback(host)
    print(f"release {version} to {registry}: "
          + ("plain HTTP (a registry on a loopback address answering without TLS: skopeo --dest-tls-verify=false, "
             "helm --plain-http)" if plain else "HTTPS, certificates verified"), file=sys.stderr, flush=True)
    helm_tls = ["--plain-http"] if plain else []
    chart_ref = f"oci://{registry}/charts/{NAME}"
    shown = subprocess.run([tools.helm(), "show", "chart", chart_ref, "--version", version, *helm_tls],
                           capture_output=True, text=True, timeout=120)
    if shown.returncode == 0 and not overwrite:
        raise ReleaseError(f"{chart_ref} version {version} is already in the registry: bump the version "
                           "(pyproject.toml, watchdog/__init__.py, Chart.yaml, Dockerfile) or re-push it: make release "
                           "OVERWRITE=1 (release.py --overwrite)")
    archive, how = find_archive(version, reuse_stale, build)
    labelled = archive_version(archive)
    if labelled != version:
        raise ReleaseError(f"{archive} is version {labelled}, not {version}: rebuild it with "
                           "`sudo .venv/bin/python tests/image/oci_archive.py`")
    print(f"image archive {archive}: {how}", file=sys.stderr, flush=True)
    t_image = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="release-") as tmp:
        work = Path(tmp)
        copy = work / "image.oci.tar"  # a copy: the node tier may rewrite .cache/node's archive while it is read
        shutil.copyfile(archive, copy)
        image_tag = f"{registry}/{NAME}:{version}"
        digestfile = work / "digest"
        run("skopeo", "copy", "--quiet", *(["--dest-tls-verify=false"] if plain else []),
            "--digestfile", str(digestfile), f"oci-archive:{copy}", f"docker://{image_tag}")
        image_digest = digestfile.read_text().strip()
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", image_digest):
            raise ReleaseError(f"skopeo wrote {image_digest!r} as the pushed image's digest")
        t_chart = time.monotonic()
        package = package_chart(work, {"repository": f"{registry}/{NAME}", "tag": version, "digest": image_digest})
        pushed = run(tools.helm(), "push", str(package), f"oci://{registry}/charts", *helm_tls)
    chart_digest = re.search(r"Digest:\s*(sha256:[0-9a-f]{64})", pushed)
    result = {
        "version": version, "registry": registry, "plain_http": str(plain).lower(),
        "image": f"{registry}/{NAME}@{image_digest}", "image_tag": image_tag, "image_digest": image_digest,
        "chart": chart_ref, "chart_version": version, "chart_digest": chart_digest[1] if chart_digest else "",
        "archive": str(archive), "archive_how": how,
        "seconds_total": f"{time.monotonic() - t0:.1f}", "seconds_image_push": f"{t_chart - t_image:.1f}",
        "seconds_chart": f"{time.monotonic() - t_chart:.1f}",
    }
    print(f"\npushed image  {image_tag}\n              digest {image_digest}\n"
          f"              (the chart pulls it by digest: {result['image']})\n"
          f"pushed chart  {chart_ref} version {version}"
          + (f"\n              digest {result['chart_digest']}" if result["chart_digest"] else "")
          + f"\ninstall with  helm install {NAME} {chart_ref} --version {version} "
          f"--namespace {NAME} --create-namespace{' --plain-http' if plain else ''}\n"
          f"({result['seconds_total']} s: image push {result['seconds_image_push']} s, chart package and push "
          f"{result['seconds_chart']} s)")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--registry", required=True, help="host[:port][/path], e.g. registry.example.com/platform")
    parser.add_argument("--reuse-stale-archive", action="store_true",
                        help="use the newest watchdog archive even when older than its inputs (still version-checked)")
    parser.add_argument("--no-build", action="store_true", help="never build the archive: fail without one")
    parser.add_argument("--overwrite", action="store_true", help="push even when this chart version is released")
    parser.add_argument("--summary", type=Path, help="also write what was pushed as JSON to this file")
    args = parser.parse_args(argv)
    try:
        result = release(args.registry, reuse_stale=args.reuse_stale_archive, build=not args.no_build,
                         overwrite=args.overwrite)
    except (ReleaseError, tools.ToolMissing) as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    if args.summary:
        args.summary.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

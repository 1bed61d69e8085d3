"""Build the watchdog's container image as an OCI archive without a Docker daemon and without pulling from any
container registry: Debian packages (mmdebstrap: bookworm minbase + python3) and PyPI wheels only.

    python tests/image/oci_archive.py [OUT.tar]      # default .cache/image/vllm-stall-watchdog.oci.tar

It is what the Dockerfile builds, from other sources: the same Python line on the same Debian suite (the
Dockerfile's ``FROM python:3.11.x-slim-bookworm``: Debian bookworm's python3 is 3.11, checked in the image), the
base image's runtime packages (ca-certificates, netbase, tzdata), the same build context (the Dockerfile's COPY
list: pyproject.toml, README.md, watchdog/), the same non-editable install into /opt/venv, and the same runtime
config (:func:`image_config`: user 65532:65532, ``python -m watchdog run``, port 8080, the final stage's ENV over
the base image's, its labels). ``tests/image/test_dockerfile.py`` compares these with the Dockerfile.

Steps: copy the build context into a scratch directory and ``pip wheel`` it and its dependencies on this machine
(its pip, its certificates; never the checkout itself, whose build/ or egg-info could leak into the wheel);
mmdebstrap a bookworm root filesystem and install those wheels into /opt/venv offline; write the root filesystem
as one gzip layer of an OCI image layout with that config, and tar the layout (skopeo's ``oci-archive``
transport). Then check it with independent readers: ``skopeo inspect`` (the config is exactly
:func:`image_config`) and ``umoci unpack``, and, inside the unpacked root filesystem as UID 65532 (chroot) with
the image's entrypoint and environment: ``run --help`` works, ``replay example:seed-incident`` reports the
stall, the image carries no ``watchdog/demo`` (the emulator, the control-plane driver, the kubelet stand-in:
pyproject.toml leaves them out of the wheel) and ``demo`` refuses in one line (exit 2). Needs root and the
Debian packages mmdebstrap, skopeo and umoci. Load it elsewhere with
``skopeo copy oci-archive:OUT.tar docker://REGISTRY/vllm-stall-watchdog:TAG`` (or ``podman load -i OUT.tar``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

from watchdog.cli.demo import NOT_INSTALLED  # the checkout's (editable) package: the line the image must print

REPO = Path(__file__).resolve().parents[2]
MIRROR = "http://deb.debian.org/debian"
EPOCH = "1735689600"  # SOURCE_DATE_EPOCH: file times in the layer, the image's `created`
# The Dockerfile's base, e.g. python:3.11.11-slim-bookworm -> Python line 3.11 on Debian bookworm.
_BASE = re.search(r"^FROM python:(\d+\.\d+)\.\d+-slim-([a-z]+)\b", (REPO / "Dockerfile").read_text(), re.M)
assert _BASE, "the Dockerfile's FROM is no longer python:X.Y.Z-slim-SUITE: adapt tests/image/oci_archive.py"
PYTHON_LINE, SUITE = _BASE[1], _BASE[2]
# What docker-library's python:*-slim-* installs besides Python (its "runtime dependencies" step).
BASE_PACKAGES = ("ca-certificates", "netbase", "tzdata")
BUILD_CONTEXT = ("pyproject.toml", "README.md", "watchdog")  # the Dockerfile builder's COPY sources
# PATH as the Dockerfile's final image has it: its `PATH=/opt/venv/bin:$PATH` over python:*-slim's
# `PATH /usr/local/bin:$PATH` over Debian's default (/usr/local/bin is empty here: Debian's python3 is in /usr/bin).
IMAGE_PATH = "/opt/venv/bin:/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def image_config(version: str) -> dict[str, object]:
    """The OCI runtime config: the Dockerfile's final stage (USER, ENV, EXPOSE, ENTRYPOINT, CMD, LABEL) with the
    base image's environment that matters at run time (PATH, LANG=C.UTF-8; python:*-slim also sets GPG_KEY,
    PYTHON_VERSION and PYTHON_SHA256, which describe its own build)."""
    return {
        "User": "65532:65532",
        "Env": [f"PATH={IMAGE_PATH}", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1",
                "MALLOC_ARENA_MAX=2"],
        "Entrypoint": ["python", "-m", "watchdog"], "Cmd": ["run"],
        "ExposedPorts": {"8080/tcp": {}},
        "Labels": {"org.opencontainers.image.title": "vllm-stall-watchdog",
                   "org.opencontainers.image.description": "Deletes vLLM pods whose engine silently wedged",
                   "org.opencontainers.image.version": version,
                   "org.opencontainers.image.licenses": "Apache-2.0"},
    }


def run(*cmd: str, **kw: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, text=True, **kw)  # type: ignore[call-overload]


def build_context(work: Path) -> Path:
    """The Dockerfile's build context: its COPY sources, without bytecode."""
    src = work / "src"
    src.mkdir()
    for name in BUILD_CONTEXT:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, src / name)
    return src


def rootfs(work: Path) -> Path:
    wheels = work / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-cache-dir", "-w", str(wheels), str(build_context(work)))
    out = work / "rootfs.tar"
    pip = ("env PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_FIND_LINKS= /opt/venv/bin/pip install -q "
           "--no-index --find-links /tmp/wheels vllm-stall-watchdog")
    include = ",".join(("python3", "python3-venv", *BASE_PACKAGES))
    run("mmdebstrap", "--variant=minbase", "--mode=root", f"--include={include}",
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        '--customize-hook=mkdir -p "$1/tmp/wheels"', f"--customize-hook=sync-in {wheels} /tmp/wheels",
        '--customize-hook=chroot "$1" python3 -m venv /opt/venv', f'--customize-hook=chroot "$1" {pip}',
        '--customize-hook=rm -rf "$1/tmp/wheels" "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
        SUITE, str(out), MIRROR, env={**os.environ, "SOURCE_DATE_EPOCH": EPOCH})
    return out


def blob(layout: Path, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def oci_archive(root_tar: Path, out: Path, version: str, work: Path) -> None:
    """One-layer OCI image layout from ``root_tar``, with the Dockerfile's runtime config, tarred to ``out``."""
    layout = work / "layout"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    raw = root_tar.read_bytes()
    packed = gzip.compress(raw, compresslevel=6, mtime=0)
    layer = blob(layout, packed, "application/vnd.oci.image.layer.v1.tar+gzip")
    created = "2025-01-01T00:00:00Z"
    config = {
        "created": created, "architecture": "amd64", "os": "linux",
        "config": image_config(version),
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(raw).hexdigest()}"]},
        "history": [{"created": created, "created_by": "tests/image/oci_archive.py (mmdebstrap + pip wheels)"}],
    }
    config_desc = blob(layout, json.dumps(config, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_desc, "layers": [layer]}
    manifest_desc = blob(layout, json.dumps(manifest, sort_keys=True).encode(),
                         "application/vnd.oci.image.manifest.v1+json")
    manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": version}
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest_desc]}))
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w") as archive:
        for path in sorted(layout.rglob("*")):
            archive.add(path, arcname=str(path.relative_to(layout)), recursive=False)


def check(out: Path, version: str, work: Path) -> None:
    """Independent readers accept it; with its entrypoint and environment, as UID 65532, the watchdog runs from it
    on the Dockerfile's Python line, and it carries no demo."""
    inspected = json.loads(run("skopeo", "inspect", "--config", f"oci-archive:{out}", capture_output=True).stdout)
    assert inspected["config"] == image_config(version), inspected["config"]
    layout = work / "unpack-layout"
    with tarfile.open(out) as archive:
        archive.extractall(layout, filter="tar")
    bundle = work / "bundle"
    run("umoci", "unpack", "--image", f"{layout}:{version}", str(bundle))
    root = bundle / "rootfs"
    config = inspected["config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    chroot = shutil.which("chroot") or "chroot"

    def in_image(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        """``args`` after the image's entrypoint, as its user, with its environment (chroot's execvp finds
        ``python`` on the image's PATH)."""
        cmd = (chroot, f"--userspec={config['User']}", str(root), *config["Entrypoint"], *args)
        print("+", " ".join(cmd), file=sys.stderr, flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == code, (args, done.returncode, done.stdout[-2000:], done.stderr[-2000:])
        return done

    python = run(chroot, str(root), "python", "--version", capture_output=True, env=env).stdout
    assert python.startswith(f"Python {PYTHON_LINE}."), (python, PYTHON_LINE)
    assert "--window-seconds" in in_image("run", "--help").stdout
    assert '"stalled": true' in in_image("replay", "example:seed-incident").stdout
    site = root / "opt" / "venv" / "lib" / f"python{PYTHON_LINE}" / "site-packages"
    assert (site / "watchdog" / "core" / "detector.py").is_file(), "the watchdog is not where it was looked for"
    assert not (site / "watchdog" / "demo").exists(), "the image carries watchdog/demo"
    record = next(site.glob("vllm_stall_watchdog-*.dist-info")) / "RECORD"
    assert "watchdog/demo/" not in record.read_text(), "the installed wheel lists watchdog/demo"
    refused = in_image("demo", code=2)
    assert refused.stdout == "" and refused.stderr == NOT_INSTALLED + "\n", refused.stderr
    print(f"ok: {out} ({out.stat().st_size / 2**20:.1f} MiB; root filesystem {tree_bytes(root) / 2**20:.1f} MiB, "
          f"/opt/venv {tree_bytes(root / 'opt' / 'venv') / 2**20:.1f} MiB): skopeo and umoci read it; as "
          f"{config['User']} `python -m watchdog run --help` and `replay` run in it on {python.strip()}; no "
          "watchdog/demo; `demo` refuses in one line", file=sys.stderr)


def tree_bytes(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / ".cache" / "image" / "vllm-stall-watchdog.oci.tar")
    missing = [tool for tool in ("mmdebstrap", "skopeo", "umoci", "chroot") if not shutil.which(tool)]
    if missing or os.geteuid() != 0:
        print(f"oci_archive: needs root and {', '.join(missing) or 'the tools'}: apt-get install -y mmdebstrap "
              "skopeo umoci", file=sys.stderr)
        return 2
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    with tempfile.TemporaryDirectory(prefix="oci-archive-") as tmp:
        work = Path(tmp)
        oci_archive(rootfs(work), out, version, work)
        check(out, version, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())

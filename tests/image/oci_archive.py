"""Build the watchdog's container image as an OCI archive without a Docker daemon and without pulling from any
container registry: Debian packages (mmdebstrap: bookworm minbase + python3) and PyPI wheels only.

    python tests/image/oci_archive.py [OUT.tar]      # default .cache/image/vllm-stall-watchdog.oci.tar

Steps: ``pip wheel`` the project and its dependencies on this machine (its pip, its certificates); mmdebstrap a
bookworm root filesystem with python3 and python3-venv and install those wheels into /opt/venv offline; write the
root filesystem as one gzip layer of an OCI image layout whose config is the Dockerfile's (user 65532:65532,
``python -m watchdog run``, port 8080), and tar the layout (skopeo's ``oci-archive`` transport). Then check it
with independent readers: ``skopeo inspect`` and ``umoci unpack``, and run ``python -m watchdog replay
example:seed-incident`` inside the unpacked root filesystem as UID 65532 (chroot). Needs root and the Debian
packages mmdebstrap, skopeo and umoci. Load it elsewhere with
``skopeo copy oci-archive:OUT.tar docker://REGISTRY/vllm-stall-watchdog:TAG`` (or ``podman load -i OUT.tar``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIRROR = "http://deb.debian.org/debian"
EPOCH = "1735689600"  # SOURCE_DATE_EPOCH: file times in the layer, the image's `created`


def run(*cmd: str, **kw: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, text=True, **kw)  # type: ignore[call-overload]


def rootfs(work: Path) -> Path:
    wheels = work / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-cache-dir", "-w", str(wheels), str(REPO))
    out = work / "rootfs.tar"
    pip = ("env PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_FIND_LINKS= /opt/venv/bin/pip install -q "
           "--no-index --find-links /tmp/wheels vllm-stall-watchdog")
    run("mmdebstrap", "--variant=minbase", "--mode=root", "--include=python3,python3-venv",
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        '--customize-hook=mkdir -p "$1/tmp/wheels"', f"--customize-hook=sync-in {wheels} /tmp/wheels",
        '--customize-hook=chroot "$1" python3 -m venv /opt/venv', f'--customize-hook=chroot "$1" {pip}',
        '--customize-hook=rm -rf "$1/tmp/wheels" "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
        "bookworm", str(out), MIRROR, env={**os.environ, "SOURCE_DATE_EPOCH": EPOCH})
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
        "config": {
            "User": "65532:65532",
            "Env": ["PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "MALLOC_ARENA_MAX=2"],
            "Entrypoint": ["python", "-m", "watchdog"], "Cmd": ["run"],
            "ExposedPorts": {"8080/tcp": {}},
            "Labels": {"org.opencontainers.image.title": "vllm-stall-watchdog",
                       "org.opencontainers.image.version": version,
                       "org.opencontainers.image.licenses": "Apache-2.0"},
        },
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
    """Independent readers accept it, and the watchdog runs from it as UID 65532."""
    inspected = json.loads(run("skopeo", "inspect", "--config", f"oci-archive:{out}", capture_output=True).stdout)
    assert inspected["config"]["User"] == "65532:65532", inspected["config"]
    layout = work / "unpack-layout"
    with tarfile.open(out) as archive:
        archive.extractall(layout, filter="tar")
    bundle = work / "bundle"
    run("umoci", "unpack", "--image", f"{layout}:{version}", str(bundle))
    root = bundle / "rootfs"
    chroot = shutil.which("chroot") or "chroot"
    done = run(chroot, "--userspec=65532:65532", str(root), "/opt/venv/bin/python", "-m", "watchdog", "replay",
               "example:seed-incident", capture_output=True, env={"PATH": "/opt/venv/bin:/usr/bin:/bin"})
    assert '"stalled": true' in done.stdout, done.stdout[-2000:]
    print(f"ok: {out} ({out.stat().st_size / 2**20:.0f} MiB): skopeo and umoci read it; `python -m watchdog "
          "replay` runs in it as 65532:65532", file=sys.stderr)


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

"""The node tier's images, built here and imported into the node's containerd (no registry anywhere):

- the watchdog image: the OCI archive ``tests/image/oci_archive.py`` builds (Debian packages + wheels), consumed as
  is and imported under ``docker.io/library/vllm-stall-watchdog:<version>``;
- the simulated-engine image: the watchdog image's layer (Debian's python3 and the watchdog's dependencies in
  /opt/venv) plus one layer with the checkout's ``watchdog`` sources in /opt/sim (``watchdog.demo.simpod``, which
  the watchdog image leaves out) and ``images/node_engine.py`` as its entrypoint;
- the pause image: ``images/pause.c`` linked statically (gcc -static), one layer, under the name containerd's
  ``sandbox_image`` points at.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
WATCHDOG_IMAGE = f"docker.io/library/vllm-stall-watchdog:{VERSION}"
ENGINE_IMAGE = "localhost/vllm-node/sim-engine:1"
PAUSE_IMAGE = "localhost/vllm-node/pause:1"
WATCHDOG_ARCHIVE = REPO / ".cache" / "node" / "vllm-stall-watchdog.oci.tar"
ENGINE_PATH = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def fresh_archive(reuse: bool = False) -> Path | None:
    """The newest watchdog archive newer than every input of the image (the Dockerfile, the builder, pyproject.toml,
    README.md, watchdog/): ``.cache/image/`` (what ``.ci/run`` built just before) or this tier's own; else None.
    ``reuse``: the newest archive however old (``NODE_TIER_REUSE_IMAGE=1``, for repeated local runs while the tree
    is being edited; never in CI)."""
    archives = [p for p in (REPO / ".cache" / "image" / "vllm-stall-watchdog.oci.tar", WATCHDOG_ARCHIVE) if p.is_file()]
    if reuse:
        return max(archives, key=lambda p: p.stat().st_mtime, default=None)
    inputs = [REPO / "Dockerfile", REPO / "tests" / "image" / "oci_archive.py", REPO / "pyproject.toml",
              REPO / "README.md", *(p for p in (REPO / "watchdog").rglob("*.py") if "demo" not in p.parts)]
    newest_input = max(p.stat().st_mtime for p in inputs if p.is_file())
    candidates = [p for p in archives if p.stat().st_mtime > newest_input]
    return max(candidates, key=lambda p: p.stat().st_mtime, default=None)


def build_watchdog_archive(out: Path = WATCHDOG_ARCHIVE) -> tuple[Path, float]:
    """Run ``tests/image/oci_archive.py OUT`` (the image builder, unmodified); (archive, seconds)."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, str(REPO / "tests" / "image" / "oci_archive.py"), str(out)],
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"tests/image/oci_archive.py exited {done.returncode}:\n{done.stderr[-4000:]}")
    return out, time.monotonic() - t0


def _tar(entries: list[tuple[str, bytes | None, int]]) -> bytes:
    """An uncompressed layer tar: (path, content or None for a directory, mode); owner root, time 0."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path, content, mode in entries:
            info = tarfile.TarInfo(path)
            info.mode, info.mtime = mode, 0
            if content is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def write_archive(out: Path, ref: str, config: dict[str, Any], layers: list[tuple[bytes, str, bytes | None]],
                  history: str) -> Path:
    """An OCI image layout tarred (``oci-archive``): ``layers`` as (gzip blob, diff_id, raw or None), with
    ``ref`` as the index's ``org.opencontainers.image.ref.name`` (a full reference: ctr keeps it as the name)."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes, media_type: str) -> dict[str, Any]:
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

    layer_descs = [blob(packed, "application/vnd.oci.image.layer.v1.tar+gzip") for packed, _, _ in layers]
    image_config = {"created": "2025-01-01T00:00:00Z", "architecture": "amd64", "os": "linux", "config": config,
                    "rootfs": {"type": "layers", "diff_ids": [diff for _, diff, _ in layers]},
                    "history": [{"created": "2025-01-01T00:00:00Z", "created_by": history}]}
    config_desc = blob(json.dumps(image_config, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_desc, "layers": layer_descs}
    manifest_desc = blob(json.dumps(manifest, sort_keys=True).encode(), "application/vnd.oci.image.manifest.v1+json")
    manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": ref}
    files = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
             "index.json": json.dumps({"schemaVersion": 2, "manifests": [manifest_desc]}).encode(),
             **{f"blobs/sha256/{digest}": data for digest, data in blobs.items()}}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w") as archive:
        for name in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return out


def _layer(raw: bytes) -> tuple[bytes, str, bytes]:
    return gzip.compress(raw, compresslevel=6, mtime=0), f"sha256:{hashlib.sha256(raw).hexdigest()}", raw


def pause_archive(work: Path) -> Path:
    binary = work / "pause"
    subprocess.run(["gcc", "-static", "-Os", "-s", "-o", str(binary), str(HERE / "images" / "pause.c")],
                   check=True, capture_output=True, text=True)
    raw = _tar([("pause", binary.read_bytes(), 0o755)])
    config = {"User": "65535:65535", "Entrypoint": ["/pause"]}
    return write_archive(work / "pause.oci.tar", PAUSE_IMAGE, config, [_layer(raw)],
                         "tests/node/images.py: pause.c, gcc -static")


def read_archive(path: Path) -> tuple[dict[str, Any], list[tuple[bytes, str, bytes | None]]]:
    """(image config, layers) of a one-manifest OCI archive."""
    with tarfile.open(path) as archive:
        def read(name: str) -> bytes:
            member = archive.extractfile(name)
            assert member is not None, name
            return member.read()
        index = json.loads(read("index.json"))
        manifest = json.loads(read(f"blobs/sha256/{index['manifests'][0]['digest'].split(':')[1]}"))
        config = json.loads(read(f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"))
        layers = [(read(f"blobs/sha256/{desc['digest'].split(':')[1]}"), diff, None)
                  for desc, diff in zip(manifest["layers"], config["rootfs"]["diff_ids"], strict=True)]
    return config, layers


def engine_archive(watchdog_archive: Path, work: Path) -> Path:
    base_config, base_layers = read_archive(watchdog_archive)
    entries: list[tuple[str, bytes | None, int]] = [("opt/sim", None, 0o755)]
    for path in sorted((REPO / "watchdog").rglob("*")):
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        rel = "opt/sim/" + str(path.relative_to(REPO))
        entries.append((rel, None, 0o755) if path.is_dir() else (rel, path.read_bytes(), 0o644))
    entries.append(("opt/sim/node_engine.py", (HERE / "images" / "node_engine.py").read_bytes(), 0o644))
    env = [e for e in base_config["config"].get("Env", []) if not e.startswith("PYTHONPATH=")]
    config = {"User": "65532:65532", "Env": [*env, "PYTHONPATH=/opt/sim"],
              "Entrypoint": ["python", "/opt/sim/node_engine.py"], "Cmd": [], "ExposedPorts": {"8000/tcp": {}},
              "WorkingDir": "/opt/sim"}
    return write_archive(work / "engine.oci.tar", ENGINE_IMAGE, config, [*base_layers, _layer(_tar(entries))],
                         "tests/node/images.py: the watchdog image's layer + watchdog sources + node_engine.py")


def import_image(ctr: Any, archive: Path, base_name: str | None = None) -> str:
    """``ctr -n k8s.io images import`` (``ctr`` is Node.ctr); returns ctr's output."""
    args = ["images", "import"]
    if base_name:
        args += ["--base-name", base_name]
    done = ctr(*args, str(archive))
    return str(done.stdout) + str(done.stderr)

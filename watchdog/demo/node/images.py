"""The real node's images, imported into its containerd (no registry anywhere):

- the watchdog image: the OCI archive ``tests/image/oci_archive.py`` builds (Debian packages + wheels; what the
  Dockerfile builds), consumed as is and imported under ``docker.io/library/vllm-stall-watchdog:<version>``. This
  module only finds it (:func:`watchdog_archive`); building it is the test tree's (``make node`` builds it when
  none exists, the node tier when it is older than its inputs);
- the simulated-engine image: the watchdog image's layer (Debian's python3 and the watchdog's dependencies in
  /opt/venv) plus one layer with the checkout's ``watchdog`` sources in /opt/sim (``watchdog.demo``, which the
  watchdog image leaves out), started as ``python -m watchdog.demo.node.engine``;
- the pause image: ``pause.c`` (next to this module) linked statically (gcc -static), one layer, under the name
  containerd's ``sandbox_image`` points at.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

from watchdog.demo.controlplane.locate import checkout

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parents[1]  # the watchdog package directory (its sources go into the engine image)
REPO = checkout() or PACKAGE.parent
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"] \
    if (REPO / "pyproject.toml").is_file() else "0"
WATCHDOG_IMAGE = f"docker.io/library/vllm-stall-watchdog:{VERSION}"
ENGINE_IMAGE = "localhost/vllm-node/sim-engine:1"
PAUSE_IMAGE = "localhost/vllm-node/pause:1"
IMAGE_ARCHIVE = REPO / ".cache" / "image" / "vllm-stall-watchdog.oci.tar"  # tests/image/oci_archive.py's default
WATCHDOG_ARCHIVE = REPO / ".cache" / "node" / "vllm-stall-watchdog.oci.tar"  # the node tier's / make node's
ENGINE_MODULE = "watchdog.demo.node.engine"


def image_inputs() -> list[Path]:
    """What the watchdog image is built from (the Dockerfile, its builder, pyproject.toml, README.md, watchdog/
    but the demo): an archive older than any of them is stale."""
    return [REPO / "Dockerfile", REPO / "tests" / "image" / "oci_archive.py", REPO / "pyproject.toml",
            REPO / "README.md", *(p for p in (REPO / "watchdog").rglob("*.py") if "demo" not in p.parts)]


def watchdog_archive(fresh_only: bool = True) -> Path | None:
    """The newest watchdog archive (``.cache/image/``: what ``.ci/run`` built; ``.cache/node/``: the node tier's or
    ``make node``'s), only if newer than every input with ``fresh_only``; else None."""
    archives = [p for p in (IMAGE_ARCHIVE, WATCHDOG_ARCHIVE) if p.is_file()]
    if fresh_only:
        newest_input = max(p.stat().st_mtime for p in image_inputs() if p.is_file())
        archives = [p for p in archives if p.stat().st_mtime > newest_input]
    return max(archives, key=lambda p: p.stat().st_mtime, default=None)


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
    subprocess.run(["gcc", "-static", "-Os", "-s", "-o", str(binary), str(HERE / "pause.c")],
                   check=True, capture_output=True, text=True)
    raw = _tar([("pause", binary.read_bytes(), 0o755)])
    config = {"User": "65535:65535", "Entrypoint": ["/pause"]}
    return write_archive(work / "pause.oci.tar", PAUSE_IMAGE, config, [_layer(raw)],
                         "watchdog/demo/node/images.py: pause.c, gcc -static")


def read_archive(path: Path) -> tuple[dict[str, Any], list[tuple[bytes, str, bytes | None]]]:
    """(image config, layers) of a one-manifest OCI archive."""
    with tarfile.open(path) as archive:
        def read(name: str) -> bytes:
            member = archive.extractfile(name)
            assert member is not None, name
            return member.read()
        index = json.loads(read("index.json"))
        manifest = json.loads(read(f"blobs/sha256/{index['manifests'][0]['digest'].split(':')[1]}"))
        config: dict[str, Any] = json.loads(read(f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"))
        layers: list[tuple[bytes, str, bytes | None]] = [
            (read(f"blobs/sha256/{desc['digest'].split(':')[1]}"), diff, None)
            for desc, diff in zip(manifest["layers"], config["rootfs"]["diff_ids"], strict=True)]
    return config, layers


def engine_archive(watchdog_archive: Path, work: Path) -> Path:
    """The simulated-engine image: the watchdog image's layers + the checkout's ``watchdog`` sources in /opt/sim."""
    base_config, base_layers = read_archive(watchdog_archive)
    entries: list[tuple[str, bytes | None, int]] = [("opt/sim", None, 0o755)]
    for path in sorted(PACKAGE.rglob("*")):
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        rel = "opt/sim/" + str(path.relative_to(PACKAGE.parent))
        entries.append((rel, None, 0o755) if path.is_dir() else (rel, path.read_bytes(), 0o644))
    env = [e for e in base_config["config"].get("Env", []) if not e.startswith("PYTHONPATH=")]
    config = {"User": "65532:65532", "Env": [*env, "PYTHONPATH=/opt/sim"],
              "Entrypoint": ["python", "-m", ENGINE_MODULE], "Cmd": [], "ExposedPorts": {"8000/tcp": {}},
              "WorkingDir": "/opt/sim"}
    return write_archive(work / "engine.oci.tar", ENGINE_IMAGE, config, [*base_layers, _layer(_tar(entries))],
                         f"watchdog/demo/node/images.py: the watchdog image's layer + watchdog/ ({ENGINE_MODULE})")


def import_image(ctr: Any, archive: Path, base_name: str | None = None) -> str:
    """``ctr -n k8s.io images import`` (``ctr`` is Node.ctr); returns ctr's output."""
    args = ["images", "import"]
    if base_name:
        args += ["--base-name", base_name]
    done = ctr(*args, str(archive))
    return str(done.stdout) + str(done.stderr)


def archive_ref(archive: Path) -> str:
    """The ``org.opencontainers.image.ref.name`` of a one-manifest OCI archive (the watchdog's: its version)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.loads(member.read())
    return str(index["manifests"][0].get("annotations", {}).get("org.opencontainers.image.ref.name", ""))


def import_watchdog_image(ctr: Any, archive: Path) -> str:
    """Import the watchdog archive as ``WATCHDOG_IMAGE`` (the chart's ``image.tag`` is this checkout's version):
    an archive built from another version (reused however old) is tagged so too, and the output says so."""
    base = WATCHDOG_IMAGE.rsplit(":", 1)[0]
    out = import_image(ctr, archive, base)
    ref = archive_ref(archive)
    imported = ref if "/" in ref else f"{base}:{ref}"
    if imported != WATCHDOG_IMAGE:
        ctr("images", "tag", "--force", imported, WATCHDOG_IMAGE)
        out += f"\n(built as {imported}; tagged {WATCHDOG_IMAGE})"
    return out

"""The node tier's one image build of its own: the watchdog archive, made by ``tests/image/oci_archive.py`` (the
image builder, unmodified) when none is newer than its inputs. Finding an archive, the simulated-engine and pause
images and the import into containerd are ``watchdog/demo/node/images.py`` (shared with ``demo --node real``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from watchdog.demo.node.images import REPO, WATCHDOG_ARCHIVE


def build_watchdog_archive(out: Path = WATCHDOG_ARCHIVE) -> tuple[Path, float]:
    """Run ``tests/image/oci_archive.py OUT`` (the image builder, unmodified); (archive, seconds)."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, str(REPO / "tests" / "image" / "oci_archive.py"), str(out)],
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"tests/image/oci_archive.py exited {done.returncode}:\n{done.stderr[-4000:]}")
    return out, time.monotonic() - t0

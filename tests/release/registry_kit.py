"""What the release tier's fixtures and tests share (a module of its own: every tier's conftest is `conftest`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

IN_CI = os.environ.get("CI", "").lower() == "true"
# Locally, RELEASE_REUSE_IMAGE=1 pushes an archive older than its inputs (the version label is still checked).
REUSE_STALE = os.environ.get("RELEASE_REUSE_IMAGE") == "1" and not IN_CI


@dataclass
class Registry:
    """A running distribution v2 registry: its address (127.0.0.1:PORT), storage directory and log."""
    address: str
    storage: Path
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

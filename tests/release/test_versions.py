"""One version: pyproject.toml, ``watchdog.__version__``, Chart.yaml's version and appVersion, the Dockerfile's
version label (the OCI archive's label and the pushed tag are pyproject's), and the documents that name a version
are not behind it. Runs in the default suite."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from release import REPO, the_version, versions

import watchdog

DOCS = ("README.md", "RUNBOOK.md", "helm/vllm-stall-watchdog/README.md", "CHANGELOG.md", "Dockerfile")
# A version written in a document: an image tag, a --set image.tag= or a helm --version.
MENTION = re.compile(r"(?:vllm-stall-watchdog:|image\.tag=|--version )(\d+\.\d+\.\d+)\b")


def semver(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_one_version_everywhere() -> None:
    found = versions()
    assert len(set(found.values())) == 1, found
    assert watchdog.__version__ == the_version()  # the imported package too


def test_documents_name_no_older_version() -> None:
    version = the_version()
    for doc in DOCS:
        text = (REPO / doc).read_text()
        older = sorted({m for m in MENTION.findall(text) if semver(m) < semver(version)})
        assert not older, f"{doc} names {older}, older than {version}"


def test_changelog_starts_with_this_version() -> None:
    headings = re.findall(r"^## \[?(\d+\.\d+\.\d+)", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert headings and headings[0] == the_version(), headings


def test_make_release_passes_overwrite_from_a_make_variable() -> None:
    """Issue 39 item 9: `make` cannot pass --overwrite; OVERWRITE=1 does, and the refusal says so."""
    import subprocess

    def recipe(*extra: str) -> str:
        done = subprocess.run(["make", "-n", "release", "REGISTRY=127.0.0.1:5000", *extra], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "--overwrite" not in recipe() and "--overwrite" not in recipe("OVERWRITE=0")
    assert recipe("OVERWRITE=1").rstrip().endswith('release.py --registry "127.0.0.1:5000" --overwrite')
    assert "make release OVERWRITE=1" in (REPO / "tests/release/release.py").read_text()

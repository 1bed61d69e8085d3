"""The documents point at things that exist: every relative Markdown link of README.md, RUNBOOK.md, docs/*.md and the
chart's README resolves to a file and, with an anchor, to one of its headings (GitHub's anchor rules); every
"RUNBOOK section N" in them, in the chart and in the code names a section RUNBOOK.md has; every docs/NAME.md named
exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MARKDOWN = [REPO / "README.md", REPO / "RUNBOOK.md", *sorted((REPO / "docs").glob("*.md")),
            REPO / "helm" / "vllm-stall-watchdog" / "README.md"]
# Where "RUNBOOK section N" and "docs/NAME.md" are written besides the Markdown: the chart and the code.
CITING = [*MARKDOWN, REPO / "helm" / "vllm-stall-watchdog" / "values.yaml",
          *sorted((REPO / "helm" / "vllm-stall-watchdog" / "templates").glob("*.txt")),
          *sorted((REPO / "helm" / "vllm-stall-watchdog" / "files").glob("*")),
          *sorted((REPO / "watchdog").rglob("*.py"))]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (outside code blocks)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc: Path) -> None:
    dangling = []
    for link in links(doc):
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:: not checked here (no network)
        target, _, anchor = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        if not path.exists():
            dangling.append(f"{link}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            dangling.append(f"{link}: no such heading")
    assert dangling == []


def test_every_cited_runbook_section_and_doc_exists() -> None:
    numbers = {h.split()[0] for h in re.findall(r"^## (.+)$", (REPO / "RUNBOOK.md").read_text(), flags=re.M)}
    wrong = []
    for path in CITING:
        text = path.read_text()
        for n in re.findall(r"RUNBOOK(?:\.md)?`?,?\s+sections?\s+(\d+)", text):
            if n not in numbers:
                wrong.append(f"{path.relative_to(REPO)}: RUNBOOK section {n}")
        for name in re.findall(r"\bdocs/([\w-]+\.md)", text):
            if not (REPO / "docs" / name).is_file():
                wrong.append(f"{path.relative_to(REPO)}: docs/{name}")
    assert wrong == []


def test_the_runbook_stays_an_operators_document() -> None:
    """RUNBOOK.md keeps to what an operator paged at night does (issue 39 item 13); the reference lives in docs/."""
    size = len((REPO / "RUNBOOK.md").read_bytes())
    assert size <= 42_000, f"RUNBOOK.md is {size} bytes: move reference material to docs/"

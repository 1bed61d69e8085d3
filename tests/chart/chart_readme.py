"""The values table of helm/vllm-stall-watchdog/README.md, generated from values.yaml (helm-docs' convention: a
``# --`` comment, possibly continued on the following ``#`` lines, documents the key right below it) and
values.schema.json (the type). ``python tests/chart/chart_readme.py`` rewrites the table between the README's markers;
tests/chart/test_chart_readme.py fails while the README differs from what this produces.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[2] / "helm" / "vllm-stall-watchdog"
README = CHART / "README.md"
START, END = "<!-- values-table:start -->", "<!-- values-table:end -->"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):")


def documented_keys(values_text: str) -> list[tuple[str, str]]:
    """(dotted key, description) for every key with a ``# --`` comment right above it, in file order."""
    rows: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in values_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if stripped.startswith("# ---"):
                pending = None  # a section heading, not a description
            elif stripped.startswith("# -- "):
                pending = [stripped.removeprefix("# -- ").strip()]
            elif pending is not None:
                pending.append(text)
            continue
        match = KEY.match(line)
        if not match:  # a blank line, a list item or a continued value
            pending = None
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        if pending is not None:
            rows.append((".".join(k for _, k in stack), " ".join(pending)))
        pending = None
    return rows


def lookup(tree: dict[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        node = node[part]
    return node


def schema_node(schema: dict[str, Any], dotted: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for part in dotted.split("."):
        node = (node or {}).get("properties", {}).get(part)
    return node


PY_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}


def type_of(node: dict[str, Any] | None, default: Any) -> str:
    if node is None:
        return PY_TYPES.get(type(default), "null")
    if "enum" in node:
        return "enum: " + ", ".join(json.dumps(v) for v in node["enum"])
    if "oneOf" in node:
        return " or ".join(str(alt.get("type")) for alt in node["oneOf"])
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    if "number" in types and "string" in types:
        types.remove("string")  # a fractional setting's decimal string is only how --set spells the number
    return " or ".join(types) or PY_TYPES.get(type(default), "null")


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(values_text: str, schema: dict[str, Any]) -> str:
    values = yaml.safe_load(values_text)
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for key, description in documented_keys(values_text):
        default = lookup(values, key)
        shown = json.dumps(default, separators=(", ", ": "))
        lines.append(f"| `{key}` | {cell(type_of(schema_node(schema, key), default))} | `{cell(shown)}` | "
                     f"{cell(description)} |")
    return "\n".join(lines)


def render(readme: str, values_text: str, schema: dict[str, Any]) -> str:
    """``readme`` with the text between the markers replaced by the generated table."""
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(values_text, schema)}\n{END}{tail}"


def generate() -> str:
    return render(README.read_text(), (CHART / "values.yaml").read_text(),
                  json.loads((CHART / "values.schema.json").read_text()))


if __name__ == "__main__":
    new = generate()
    changed = new != README.read_text()
    README.write_text(new)
    print(f"{README}: {'rewritten' if changed else 'already up to date'}", file=sys.stderr)

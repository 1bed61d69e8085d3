"""The chart README's values table is what tests/chart/chart_readme.py generates from values.yaml and its schema, and
the generator reads the ``# --`` convention as documented."""

from __future__ import annotations

import json

import chart_readme
import yaml

SCHEMA = {"type": "object", "properties": {
    "replicaCount": {"type": "integer"},
    "image": {"type": "object", "properties": {"pullPolicy": {"enum": ["IfNotPresent", "Always"]}}},
    "config": {"type": "object", "properties": {"windowSeconds": {"type": ["number", "string"],
                                                                  "pattern": "^0*[1-9][0-9]*$"}}},
}}
VALUES = """\
# A file comment.

# -- Number of pods: 1 or 0
# (continued).
replicaCount: 1

# The image (a plain comment: no row).
image:
  # -- Pull policy.
  pullPolicy: IfNotPresent
  tag: ""
config:
  # --- A section heading, not a description.
  # More heading.
  undocumented: true
  # -- Seconds | window.
  windowSeconds: 120
  targets:
    - name: a
      podSelector: app=a
# -- Resources.
resources:
  # -- Requests.
  requests:
    cpu: 50m
"""


def test_rows_are_the_documented_keys_with_their_continued_comments() -> None:
    assert chart_readme.documented_keys(VALUES) == [
        ("replicaCount", "Number of pods: 1 or 0 (continued)."),
        ("image.pullPolicy", "Pull policy."),
        ("config.windowSeconds", "Seconds | window."),
        ("resources", "Resources."),
        ("resources.requests", "Requests."),
    ]


def test_table_types_from_the_schema_defaults_as_json_pipes_escaped() -> None:
    lines = chart_readme.table(VALUES, SCHEMA).splitlines()
    assert lines[2:] == [
        "| `replicaCount` | integer | `1` | Number of pods: 1 or 0 (continued). |",
        '| `image.pullPolicy` | enum: "IfNotPresent", "Always" | `"IfNotPresent"` | Pull policy. |',
        "| `config.windowSeconds` | number | `120` | Seconds \\| window. |",  # --set's decimal string: a number
        '| `resources` | object | `{"requests": {"cpu": "50m"}}` | Resources. |',
        '| `resources.requests` | object | `{"cpu": "50m"}` | Requests. |',  # not in the schema: from the value
    ]


def test_render_replaces_only_the_text_between_the_markers() -> None:
    readme = f"# Title\n\ntext\n\n{chart_readme.START}\nold table\n{chart_readme.END}\n\nafter\n"
    out = chart_readme.render(readme, VALUES, SCHEMA)
    assert out.startswith("# Title\n\ntext\n\n") and out.endswith(f"{chart_readme.END}\n\nafter\n")
    assert "old table" not in out and "| `replicaCount` |" in out


def test_chart_readme_values_table_is_up_to_date() -> None:
    assert chart_readme.README.read_text() == chart_readme.generate(), (
        "helm/vllm-stall-watchdog/README.md is out of date: run `.venv/bin/python tests/chart/chart_readme.py`")


def test_chart_readme_documents_every_top_level_value() -> None:
    """Every top-level key of values.yaml (and so every value the schema allows) has at least one row."""
    text = (chart_readme.CHART / "values.yaml").read_text()
    rows = {key for key, _ in chart_readme.documented_keys(text)}
    schema = json.loads((chart_readme.CHART / "values.schema.json").read_text())
    for top in yaml.safe_load(text):
        assert top in schema["properties"]
        assert any(row == top or row.startswith(f"{top}.") for row in rows), top

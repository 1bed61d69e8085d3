"""docs/configuration.md is what tests/config/config_reference.py makes of the settings table (no drift)."""

from __future__ import annotations

from config_reference import PATH, reference

from watchdog.config.settings import SETTINGS


def test_the_configuration_reference_is_generated_from_the_settings_table() -> None:
    assert PATH.read_text() == reference(), (
        "docs/configuration.md differs from watchdog/config/settings.py: run "
        "`.venv/bin/python tests/config/config_reference.py`")


def test_every_setting_has_a_row_with_its_three_names() -> None:
    text = reference()
    for s in SETTINGS:
        assert f"| `{s.key}` | `{s.flag}` | `{s.env}` |" in text
    assert "- `windowSeconds` >= 3 x scrapeIntervalSeconds" in text
    assert "- `maxDeletionsPerNamespace` <= maxDeletions" in text

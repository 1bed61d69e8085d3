"""PURE: which metric names carry the stall signals, per inference engine kind.

A :class:`Profile` names, exactly as they appear on the wire (sample names, never prefixes):

- ``running``: gauge of requests being executed now (a wedge shows running > 0 ...)
- ``waiting``: gauge of queued requests (``None`` if the engine has none)
- ``generation_tokens`` / ``prompt_tokens``: monotonic counters (... while these stay flat)
- ``heartbeat``: a sample that ticks once per engine step even when no token is counted (vLLM V1 counts
  prompt tokens only when a prefill finishes, so a long prefill looks frozen without it); ``None`` if the
  engine has none
- ``engine_labels``: the label names that identify one engine inside one ``/metrics`` body. A sample is
  keyed by those of these labels it carries; every other label (LoRA adapter, reason, ...) is summed over.
  Labels whose series repeat the same engine's data in several processes (tensor/pipeline ranks) must be
  listed here, or they would be added up.
- ``default_port``: the engine's usual HTTP port (int, 1..65535)

Built in (:data:`PROFILES`): ``vllm`` (V0 and V1), ``sglang`` (``--enable-metrics``), ``llamacpp``
(``llama-server --metrics``). :func:`custom_profile` builds one from configuration on top of a built-in one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from types import MappingProxyType

__all__ = ["PROFILES", "Profile", "custom_profile", "get_profile"]

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class Profile:
    """Metric names of one engine kind; see the module docstring for each field's meaning."""

    name: str
    running: str
    waiting: str | None
    generation_tokens: str
    prompt_tokens: str
    heartbeat: str | None
    engine_labels: tuple[str, ...]
    default_port: int

    def metric_names(self) -> tuple[str, ...]:
        """The sample names this profile reads, in field order, without the absent (``None``) ones."""
        names = (self.running, self.waiting, self.generation_tokens, self.prompt_tokens, self.heartbeat)
        return tuple(n for n in names if n is not None)


PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        "vllm": Profile(
            name="vllm",
            running="vllm:num_requests_running",
            waiting="vllm:num_requests_waiting",
            generation_tokens="vllm:generation_tokens_total",
            prompt_tokens="vllm:prompt_tokens_total",
            # A histogram: its _count ticks once per engine step.
            heartbeat="vllm:iteration_tokens_total_count",
            # V1: one series per data-parallel engine ("0".."N-1"); V0 has model_name only.
            engine_labels=("engine", "model_name"),
            default_port=8000,
        ),
        "sglang": Profile(
            name="sglang",
            running="sglang:num_running_reqs",
            waiting="sglang:num_queue_reqs",
            generation_tokens="sglang:generation_tokens_total",
            prompt_tokens="sglang:prompt_tokens_total",
            heartbeat=None,
            # Newer SGLang adds engine_type/tp_rank/pp_rank (and dp_rank with DP attention): each rank's
            # scheduler reports its own copy, so they identify a series instead of being summed.
            engine_labels=("dp_rank", "engine_type", "model_name", "pp_rank", "tp_rank"),
            default_port=30000,
        ),
        "llamacpp": Profile(
            name="llamacpp",
            running="llamacpp:requests_processing",
            waiting="llamacpp:requests_deferred",
            generation_tokens="llamacpp:tokens_predicted_total",
            prompt_tokens="llamacpp:prompt_tokens_total",
            heartbeat="llamacpp:n_decode_total",
            engine_labels=(),
            default_port=8080,
        ),
    }
)


def get_profile(name: str) -> Profile:
    """Return the built-in profile ``name``; raises ``ValueError("unknown profile 'x' (known: ...)")``."""
    try:
        return PROFILES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(sorted(PROFILES))})") from None


_REQUIRED_NAMES = ("running", "generation_tokens", "prompt_tokens")
_OPTIONAL_NAMES = ("waiting", "heartbeat")
_SETTABLE = frozenset(f.name for f in dataclass_fields(Profile)) - {"name"}


def custom_profile(name: str, fields: Mapping[str, object], base: str = "vllm") -> Profile:
    """A profile named ``name``: the built-in profile ``base`` with ``fields`` replaced.

    ``fields`` maps Profile field names to values: metric names are strings (``waiting`` and ``heartbeat``
    may be ``None`` or ``""`` for "this engine has none"), ``engine_labels`` a list/tuple of label names,
    ``default_port`` an int in 1..65535. Raises ``ValueError`` naming the bad key (unknown key, wrong type,
    invalid metric or label name) or the unknown ``base``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"custom profile name must be a non-empty string, got {name!r}")
    start = get_profile(base)
    changes: dict[str, object] = {}
    for key, value in fields.items():
        if key not in _SETTABLE:
            raise ValueError(f"custom profile {name!r}: unknown key {key!r} (known: {', '.join(sorted(_SETTABLE))})")
        changes[key] = _check_field(name, key, value)
    return replace(start, name=name, **changes)  # type: ignore[arg-type]


def _check_field(profile: str, key: str, value: object) -> object:
    where = f"custom profile {profile!r}: {key}"
    if key in _REQUIRED_NAMES or key in _OPTIONAL_NAMES:
        if key in _OPTIONAL_NAMES and (value is None or value == ""):
            return None
        if not isinstance(value, str) or not _METRIC_NAME.fullmatch(value):
            raise ValueError(f"{where} must be a metric sample name like 'vllm:num_requests_running', got {value!r}")
        return value
    if key == "engine_labels":
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ValueError(f"{where} must be a list of label names, got {value!r}")
        for label in value:
            if not isinstance(label, str) or not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"{where}: {label!r} is not a valid label name")
        return tuple(dict.fromkeys(value))
    # default_port
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"{where} must be an integer port in 1..65535, got {value!r}")
    return value

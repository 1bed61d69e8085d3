"""PURE: which series carry the stall signals, per inference engine kind.

A :class:`Profile` names series with :class:`Selector` s (a sample name exactly as on the wire, never a prefix,
plus optional label matchers such as ``mode="decode"`` or ``reason!="deferred"``):

- ``running``: gauge of requests being executed now (a wedge shows running > 0 ...)
- ``waiting``: gauge of queued requests (``None`` if the engine has none); ``waiting_ignored``: series
  subtracted from it, for queued requests that are not a wedge (vLLM's KV-transfer ``deferred`` ones)
- ``progress``: the **progress signals** (... while none of these moves). Counters must rise, gauges must
  change; any one of them moving is progress. Each has a one-line ``note`` of when the engine moves it.
- ``paused``: gauges that, when > 0, say the engine is paused or sleeping on purpose: never stalled;
  ``awake``: gauges that read 0 while the engine sleeps (vLLM's ``engine_sleep_state{sleep_state="awake"}``)
- ``engine_labels``: the label names that identify one engine inside one ``/metrics`` body. A sample is keyed
  by those of these labels it carries; labels in ``collapse_labels`` name copies of the same engine's data
  printed by several processes (tensor/pipeline ranks): their values are combined by taking the largest, never
  added; every other label (LoRA adapter, mode, reason, ...) is summed over.
- ``metrics_path`` and ``default_port``: where the engine serves its exposition.

Built in (:data:`PROFILES`): ``vllm`` (V0 and V1), ``sglang`` (``--enable-metrics``), ``llamacpp``
(``llama-server --metrics``), ``trtllm`` (``trtllm-serve``) and ``lmdeploy`` (``--enable-metrics``).
:func:`custom_profile` builds one from configuration on top of a built-in one. docs/engines.md has the table of
what moves when, with sources.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

__all__ = ["PROFILES", "Profile", "Selector", "custom_profile", "get_profile", "label_name_problem", "parse_selector",
           "target_profile"]

SignalKind = Literal["counter", "gauge"]
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def label_name_problem(name: str) -> str | None:
    """Why ``name`` is not a usable Prometheus label name (``__`` names are reserved), or None."""
    if not _LABEL_NAME.fullmatch(name) or name.startswith("__"):
        return "must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"
    return None
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(!=|=)\s*"([^"\\]*)"\s*(?:,|$)')
_COUNTER_SUFFIXES = ("_total", "_count", "_sum")


@dataclass(frozen=True)
class Selector:
    """One series of the exposition: ``metric`` (a sample name) whose labels satisfy every matcher.

    ``match``: ``(label, value, equal)`` triples (``equal`` False for ``!=``). ``kind``: ``counter`` (rises;
    a drop is a reset) or ``gauge``. ``note``: when the engine moves it, for docs and ``check``.
    ``completion_only``: the engine moves it only when a request finishes, so one long request keeps it flat:
    alone it is no evidence of a stall (see the detector's completion-only rule).
    """

    metric: str
    match: tuple[tuple[str, str, bool], ...] = ()
    kind: SignalKind = "counter"
    note: str = ""
    completion_only: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` satisfy every matcher (a missing label reads as ``""``, as in PromQL)."""
        return all((labels.get(name, "") == value) == equal for name, value, equal in self.match)

    def __str__(self) -> str:
        if not self.match:
            return self.metric
        inner = ",".join(f'{name}{"=" if equal else "!="}"{value}"' for name, value, equal in self.match)
        return f"{self.metric}{{{inner}}}"


def parse_selector(text: str, kind: SignalKind | None = None, note: str = "",
                   completion_only: bool = False) -> Selector:
    """``name`` or ``name{label="v",other!="w"}`` -> :class:`Selector`; raises ``ValueError`` saying why.

    ``kind`` defaults to ``counter`` for names ending in ``_total``/``_count``/``_sum``, else ``gauge``.
    A trailing ``@completion`` marks a completion-only signal (``name{...}@completion``).
    """
    if isinstance(text, str) and text.rstrip().endswith("@completion"):
        text, completion_only = text.rstrip()[: -len("@completion")], True
    if not isinstance(text, str):
        raise ValueError(f"expected a series selector like 'vllm:num_requests_running', got {text!r}")
    name, brace, rest = text.strip().partition("{")
    if not _METRIC_NAME.fullmatch(name):
        raise ValueError(f"{text!r}: {name!r} is not a metric sample name like 'vllm:num_requests_running'")
    matchers: list[tuple[str, str, bool]] = []
    if brace:
        if not rest.endswith("}"):
            raise ValueError(f"{text!r}: label matchers must end with '}}'")
        body, pos = rest[:-1].strip(), 0
        while pos < len(body):
            found = _MATCHER.match(body, pos)
            if found is None:
                regex = " (regular-expression matchers =~ and !~ are not supported)" if "~" in body[pos:] else ""
                raise ValueError(f"{text!r}: expected label=\"value\" or label!=\"value\" at {body[pos:]!r}"
                                 f"{regex}")
            label, op, value = found.groups()
            if label.startswith("__"):
                raise ValueError(f"{text!r}: {label!r} is a reserved label name")
            matchers.append((label, value, op == "="))
            pos = found.end()
    if kind is None:
        kind = "counter" if name.endswith(_COUNTER_SUFFIXES) else "gauge"
    return Selector(name, tuple(matchers), kind, note, completion_only)


def _s(text: str, note: str = "", kind: SignalKind | None = None, completion_only: bool = False) -> Selector:
    return parse_selector(text, kind, note, completion_only)


@dataclass(frozen=True)
class Profile:
    """Series of one engine kind; see the module docstring for each field's meaning."""

    name: str
    running: Selector
    waiting: Selector | None
    progress: tuple[Selector, ...]
    engine_labels: tuple[str, ...]
    default_port: int
    metrics_path: str = "/metrics"
    waiting_ignored: tuple[Selector, ...] = ()
    paused: tuple[Selector, ...] = ()
    awake: tuple[Selector, ...] = ()
    collapse_labels: tuple[str, ...] = ()

    def __hash__(self) -> int:  # every parse looks its matcher up by profile: the fields' hash once, not each time
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f) for f in self.__dataclass_fields__))
            object.__setattr__(self, "_hash", cached)
        return cached

    def metric_names(self) -> tuple[str, ...]:
        """The sample names this profile reads, each once, in field order."""
        selectors = (self.running, self.waiting, *self.waiting_ignored, *self.progress, *self.paused, *self.awake)
        return tuple(dict.fromkeys(s.metric for s in selectors if s is not None))

    def progress_names(self) -> tuple[str, ...]:
        """The progress signals as selector strings, in order (names of the detector's values)."""
        return tuple(str(s) for s in self.progress)


PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        "vllm": Profile(
            name="vllm",
            running=_s("vllm:num_requests_running", "every engine step (scheduler stats; 0.10.2+, before only "
                       "steps with outputs)"),
            waiting=_s("vllm:num_requests_waiting", "every engine step; includes the deferred ones"),
            # Waiting on purpose (P/D remote KV pulls, grammar compilation, LoRA budget): not a wedge.
            waiting_ignored=(_s('vllm:num_requests_waiting_by_reason{reason="deferred"}',
                                "every engine step (0.20+)"),),
            progress=(
                _s("vllm:generation_tokens_total", "steps that produce request outputs"),
                _s("vllm:iteration_tokens_total_count", "steps that produce request outputs (histogram count)"),
                _s("vllm:kv_cache_usage_perc", "every engine step (0.10.2+); grows chunk by chunk during a "
                   "long prefill that produces no output"),
                _s("vllm:gpu_cache_usage_perc", "as kv_cache_usage_perc: its name before 0.9.2, hidden in 0.11, "
                   "gone in 0.12"),
                _s("vllm:estimated_flops_per_gpu_total", "every step that scheduled tokens, with "
                   "--enable-mfu-metrics"),
                _s("vllm:prompt_tokens_total", "the whole prompt at once, when its first token is produced",
                   completion_only=True),
                _s("vllm:request_success_total", "when a request finishes", completion_only=True),
            ),
            paused=(
                _s("vllm:sleep_mode_operations_in_flight", "a sleep or wake-up under way"),
                _s("vllm:rl_weight_update_operations_in_flight", "an RL weight update under way"),
            ),
            awake=(_s('vllm:engine_sleep_state{sleep_state="awake"}', "0 from /sleep (any level) until fully "
                      "awake (0.11.2+)"),),
            # V1: one series per data-parallel engine ("0".."N-1"); V0 has model_name only.
            engine_labels=("engine", "model_name"),
            default_port=8000,
        ),
        "sglang": Profile(
            name="sglang",
            # priority="" holds the totals when priority scheduling adds per-priority series.
            running=_s('sglang:num_running_reqs{priority=""}', "scheduler: every 40 decode steps "
                       "(--decode-log-interval), per prefill batch, every 30 s when idle"),
            waiting=_s('sglang:num_queue_reqs{priority=""}', "scheduler: as num_running_reqs"),
            progress=(
                _s("sglang:realtime_tokens_total", "scheduler: decode tokens every decode step, prefill tokens "
                   "per chunk (0.5.7+)"),
                _s("sglang:cuda_graph_passes_total", "every forward pass on every TP rank (0.5.7+)"),
                _s("sglang:forward_execution_seconds_total", "scheduler, per forward batch (newer versions)"),
                _s("sglang:inter_token_latency_seconds_count", "tokenizer: as tokens stream (every 50 tokens "
                   "of a non-streaming request); joins the scheduler series only without data parallelism"),
                _s("sglang:generation_tokens_total", "tokenizer: when a request finishes", completion_only=True),
            ),
            # One scheduler per dp rank; tp/pp/moe-ep ranks print copies of its data; pid marks gauges of
            # prometheus_client's "all" multiprocess mode.
            engine_labels=("dp_rank", "engine_type", "model_name"),
            collapse_labels=("moe_ep_rank", "pid", "pp_rank", "tp_rank"),
            default_port=30000,
        ),
        "llamacpp": Profile(
            name="llamacpp",
            running=_s("llamacpp:requests_processing", "read at scrape time from the server loop"),
            waiting=_s("llamacpp:requests_deferred", "read at scrape time from the server loop"),
            progress=(
                _s("llamacpp:n_decode_total", "every llama_decode call, prompt batches included"),
                _s("llamacpp:tokens_predicted_total", "when a slot is released (request finished)",
                   completion_only=True),
                _s("llamacpp:prompt_tokens_total", "when a prompt is fully processed", completion_only=True),
            ),
            engine_labels=(),
            default_port=8080,
        ),
        "trtllm": Profile(
            name="trtllm",
            running=_s("trtllm_num_requests_running", "iteration stats, collected when a request finishes"),
            waiting=_s("trtllm_num_requests_waiting", "iteration stats, collected when a request finishes"),
            progress=(
                _s("trtllm_generation_tokens_total", "when a request finishes", completion_only=True),
                _s("trtllm_prompt_tokens_total", "when a request finishes", completion_only=True),
                _s("trtllm_kv_cache_utilization", "iteration stats, collected when a request finishes",
                   completion_only=True),
                # Per-iteration deltas, summed over every iteration drained: trtllm-serve drains the engine's
                # stats queue only when a request completes (completion-only there); Dynamo's TRT-LLM worker
                # polls get_stats_async in a loop (live there: a custom profile without @completion).
                _s("trtllm_kv_cache_iter_missed_blocks_total", "iteration stats: trtllm-serve logs them when a "
                   "request finishes; live under Dynamo's TRT-LLM worker (its stats polling loop)",
                   completion_only=True),
                _s("trtllm_kv_cache_gen_alloc_blocks_total", "iteration stats: trtllm-serve logs them when a "
                   "request finishes; live under Dynamo's TRT-LLM worker (its stats polling loop)",
                   completion_only=True),
            ),
            engine_labels=("engine_type", "model_name"),
            collapse_labels=("pid",),
            metrics_path="/prometheus/metrics",
            default_port=8000,
        ),
        "lmdeploy": Profile(
            name="lmdeploy",
            running=_s("lmdeploy:num_requests_running", "every 10 s (the api_server's schedule refresh)"),
            waiting=_s("lmdeploy:num_requests_waiting", "every 10 s (the api_server's schedule refresh)"),
            progress=(
                _s("lmdeploy:generation_tokens_total", "every output the engine streams: each step's new tokens "
                   "of each request"),
                _s("lmdeploy:iteration_tokens_total_count", "every output the engine streams (histogram count)"),
                _s("lmdeploy:gpu_cache_usage_perc", "every 10 s, with the running gauge"),
                _s("lmdeploy:prompt_tokens_total", "the whole prompt at once, with its first output",
                   completion_only=True),
                _s("lmdeploy:request_success_total", "when a request finishes", completion_only=True),
            ),
            # One PrometheusStatLogger per api_server process (a new one unregisters the old): engine is its dp
            # rank (0 with turbomind).
            engine_labels=("engine", "model_name"),
            default_port=23333,
        ),
    }
)


def get_profile(name: str) -> Profile:
    """Return the built-in profile ``name``; raises ``ValueError("unknown profile 'x' (known: ...)")``."""
    try:
        return PROFILES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(sorted(PROFILES))})") from None


#: Keys a custom profile may set; the three legacy counter keys build ``progress`` when it is not given.
CUSTOM_KEYS = ("running", "waiting", "waiting_ignored", "progress", "paused", "awake", "engine_labels",
               "collapse_labels", "metrics_path", "default_port")
LEGACY_PROGRESS_KEYS = ("generation_tokens", "prompt_tokens", "heartbeat")


def custom_profile(name: str, fields: Mapping[str, object], base: str = "vllm") -> Profile:
    """A profile named ``name``: the built-in profile ``base`` with ``fields`` replaced.

    ``fields`` keys (:data:`CUSTOM_KEYS`): ``running`` a selector string; ``waiting`` a selector or ``None``/
    ``""`` (none); ``progress``, ``waiting_ignored``, ``paused``, ``awake`` lists of selector strings
    (``progress`` must not be empty); ``engine_labels``/``collapse_labels`` lists of label names;
    ``metrics_path`` an absolute path; ``default_port`` an int in 1..65535. The legacy keys
    ``generation_tokens``, ``prompt_tokens`` and ``heartbeat`` (one counter each) add their counter to the
    base's progress signals (``progress`` replaces the list). Raises ``ValueError`` naming the bad key
    (unknown key, wrong type, invalid selector or label name) or the unknown ``base``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"custom profile name must be a non-empty string, got {name!r}")
    start = get_profile(base)
    changes: dict[str, object] = {}
    legacy: list[Selector] = []
    for key, value in fields.items():
        where = f"custom profile {name!r}: {key}"
        if key in LEGACY_PROGRESS_KEYS:
            if value not in (None, ""):
                legacy.append(_selector(where, value, "counter"))
            continue
        if key not in CUSTOM_KEYS:
            known = ", ".join((*CUSTOM_KEYS, *LEGACY_PROGRESS_KEYS))
            raise ValueError(f"custom profile {name!r}: unknown key {key!r} (known: {known})")
        changes[key] = _check_field(where, key, value)
    if legacy:
        if "progress" in changes:
            raise ValueError(f"custom profile {name!r}: give either progress or the legacy "
                             f"{'/'.join(LEGACY_PROGRESS_KEYS)} keys, not both")
        # Added to the base's signals, never replacing them: a config written when these keys named the only
        # counters must not lose the base's newer signals (vLLM's KV-cache gauge keeps a long prefill alive).
        present = {(s.metric, s.match) for s in start.progress}
        changes["progress"] = (*start.progress, *(s for s in legacy if (s.metric, s.match) not in present))
    profile = replace(start, name=name, **changes)  # type: ignore[arg-type]
    both = sorted(set(profile.engine_labels) & set(profile.collapse_labels))
    if both:
        raise ValueError(f"custom profile {name!r}: {', '.join(both)} cannot be both an engine label and a "
                         "collapsed label")
    return profile


def target_profile(name: str, base: str, fields: Mapping[str, object]) -> Profile:
    """The profile of target ``name``: the built-in ``base``, changed by ``fields`` when there are any (the one
    rule ``run``, ``check``, ``replay`` and the config loader share). Raises ``ValueError`` as
    :func:`custom_profile`."""
    return custom_profile(name, fields, base=base) if fields else get_profile(base)


def _selector(where: str, value: object, kind: SignalKind | None = None) -> Selector:
    try:
        return parse_selector(value, kind)  # type: ignore[arg-type]  # a non-string is refused there
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _gauge(where: str, value: object) -> Selector:
    selector = _selector(where, value, "gauge")
    if selector.completion_only:
        raise ValueError(f"{where}: @completion marks progress signals only")
    return selector


def _selectors(where: str, key: str, value: object) -> tuple[Selector, ...]:
    """A list of series selectors (one string is a list of one): progress signals, else gauges."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Sequence) or isinstance(items, bytes):
        raise ValueError(f"{where} must be a list of series selectors, got {value!r}")
    selectors = tuple(_selector(where, item) if key == "progress" else _gauge(where, item) for item in items)
    if key == "progress" and not selectors:
        raise ValueError(f"{where} must name at least one progress signal")
    return selectors


def _label_names(where: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{where} must be a list of label names, got {value!r}")
    for label in value:
        if not isinstance(label, str) or label_name_problem(label):
            raise ValueError(f"{where}: {label!r} is not a valid label name")
    return tuple(dict.fromkeys(value))


def _check_field(where: str, key: str, value: object) -> object:
    if key == "running":
        return _gauge(where, value)
    if key == "waiting":
        return None if value in (None, "") else _gauge(where, value)
    if key in ("progress", "waiting_ignored", "paused", "awake"):
        return _selectors(where, key, value)
    if key in ("engine_labels", "collapse_labels"):
        return _label_names(where, value)
    if key == "metrics_path":
        if not isinstance(value, str) or not value.startswith("/") or "//" in value or ".." in value:
            raise ValueError(f"{where} must be an absolute URL path like /metrics, got {value!r}")
        return value
    # default_port
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"{where} must be an integer port in 1..65535, got {value!r}")
    return value

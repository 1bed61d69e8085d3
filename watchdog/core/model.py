"""The model types every layer shares, and the label and annotation names of the watchdog's API. Pure.

- :class:`Target`: which pods to watch and how to scrape them (a row of the ``targets`` setting).
- :class:`OwnerRef` and :class:`WatchedPod`: one discovered pod, as the cycle and the remediator see it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from watchdog.core.vocab import NamespaceMode, StallAction

NAMESPACE_LABEL = "vllm-watchdog.io/enabled"
EXCLUDE_ANNOTATION = "vllm-watchdog.io/exclude"
PORT_ANNOTATION = "vllm-watchdog.io/metrics-port"
#: A pod's own stall window (seconds): may only lengthen its target's, up to maxPodWindowSeconds (core/podpolicy).
WINDOW_ANNOTATION = "vllm-watchdog.io/window-seconds"
#: An RFC 3339 time until which the pod's engines read paused, at most maxPodPauseSeconds ahead (core/podpolicy).
PAUSE_ANNOTATION = "vllm-watchdog.io/paused-until"
#: Every pod annotation above is tenant text, read cut to this many characters (discovery, and the pod cache's
#: trimmed pods: a tenant's 256 KiB value costs 64 characters).
MAX_ANNOTATION_CHARS = 64


def annotation(meta: Mapping[str, Any], name: str) -> str | None:
    """Pod ``metadata``'s annotation ``name`` as text cut to :data:`MAX_ANNOTATION_CHARS`, or None."""
    raw = (meta.get("annotations") or {}).get(name)
    return None if raw is None else str(raw)[:MAX_ANNOTATION_CHARS]


#: The readiness gate condition type a pod declares in ``spec.readinessGates`` to be quarantined through it.
GATE_CONDITION = "vllm-watchdog.io/engine-progressing"
#: Opt-in label values and the namespace mode each one means; any other value means "not watched".
OPT_IN_VALUES: Mapping[str, NamespaceMode] = {"true": "enforce", "dry-run": "dry-run"}
NEVER_WATCHED_NAMESPACES = frozenset({"kube-system"})
COMPONENT = "vllm-stall-watchdog"  # Event reportingComponent/source, User-Agent product
#: Leader election's timings, client-go's (seconds): how long others wait after last seeing a renew, how long the
#: leader acts without one, how often it renews.
LEASE_DURATION_S, RENEW_DEADLINE_S, RETRY_PERIOD_S = 15.0, 10.0, 2.0
#: The leadership fence's margin: a write is sent only while the Lease outlasts its timeout by this much.
FENCE_MARGIN_S = 1.0
#: The longest API timeout the fence can work with: a renew every RETRY_PERIOD_S leaves the Lease valid for
#: LEASE_DURATION_S - RETRY_PERIOD_S (13 s) at worst between renews, which must exceed the timeout + the margin
#: with a second to spare for the renew's own round trip.
MAX_FENCED_TIMEOUT_S = LEASE_DURATION_S - RETRY_PERIOD_S - FENCE_MARGIN_S - 2.0
#: How far this replica's wall clock may disagree with the API server's (seconds) before it says so (a WARNING,
#: vllm_watchdog_clock_skew_seconds, /status). The deletion ledger keeps the server's clock whatever the skew.
MAX_CLOCK_SKEW_S = 5.0


@dataclass(frozen=True)
class Target:
    """Which pods to watch and how to scrape them. ``pod_selector``: a Kubernetes label selector string;
    ``port``: a container port name or number; ``path``: the metrics path (the loader fills in the profile's);
    ``metrics``: custom profile keys over ``profile`` (see :func:`watchdog.core.profiles.custom_profile`);
    ``source``: where its signals come from (None: the global ``source`` setting); ``window_seconds``,
    ``min_samples``, ``action``, ``completion_only_window_seconds``: its own stall policy, each None for the
    global setting of that name (:func:`watchdog.core.podpolicy.policy_of`)."""

    name: str
    pod_selector: str
    profile: str = "vllm"
    port: str = "http"
    path: str = "/metrics"
    metrics: Mapping[str, object] = field(default_factory=dict)
    source: str | None = None  # "scrape" or "prometheus"; None: the global setting ``source``
    window_seconds: float | None = None
    min_samples: int | None = None
    action: StallAction | None = None
    completion_only_window_seconds: float | None = None


DEFAULT_TARGETS: tuple[Target, ...] = (
    Target("llmkube-vllm", "inference.llmkube.dev/runtime=vllm"),
    Target("vllm", "app.kubernetes.io/name=vllm"),
)


@dataclass(frozen=True)
class OwnerRef:
    """A controller owner reference as found on the object (``kind``, ``name``, ``api_version``, ``uid``)."""

    api_version: str
    kind: str
    name: str
    uid: str


def owner_key(namespace: str, owner: OwnerRef | None) -> str | None:
    """``namespace/Kind/name`` of a pod's controller owner: the unit of the per-owner rules (deletion, drain)."""
    return f"{namespace}/{owner.kind}/{owner.name}" if owner else None


@dataclass(frozen=True)
class WatchedPod:
    """One pod to scrape this cycle. ``url`` is ``http://{ip}:{port}{path}``; ``mode`` comes from the
    namespace label; ``restart_count`` sums the containers' restart counts (state resets when it changes)."""

    uid: str
    namespace: str
    name: str
    ip: str
    port: int
    path: str
    target_name: str  # the settings target (Target.name) judging it (core/podpolicy.resolve_target)
    profile: str
    mode: NamespaceMode
    restart_count: int
    owner: OwnerRef | None
    metrics: Mapping[str, object] = field(default_factory=dict)
    created: str = ""  # metadata.creationTimestamp (RFC 3339, UTC)
    node: str | None = None  # spec.nodeName
    container: str = ""  # the engine container: the one declaring the metrics port, else the first
    window_annotation: str | None = None  # the pod's vllm-watchdog.io/window-seconds (cut to 64 chars), if any
    pause_annotation: str | None = None  # the pod's vllm-watchdog.io/paused-until (cut to 64 chars), if any
    tenant: str = ""  # who owns its namespace (discovery.tenant_of); "": its namespace is its own tenant
    targets: tuple[str, ...] = ()  # every target whose podSelector matched it (configuration order)
    ports: tuple[int, ...] = ()  # the ports its containers declare (the direct reads of source prometheus)

    def __post_init__(self) -> None:
        if not self.tenant:
            object.__setattr__(self, "tenant", self.namespace)

    @property
    def url(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"http://{host}:{self.port}{self.path}"

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def owner_key(self) -> str | None:
        """``namespace/Kind/name`` of the controller owner (the unit of the per-owner deletion rule)."""
        return owner_key(self.namespace, self.owner)

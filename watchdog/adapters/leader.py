"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's ``leaderelection`` does it (I/O).

Only the leader may delete pods; :meth:`LeaderElector.is_leader` is meant to be asked right before each
deletion. The rules:

- Lease ``spec``: ``holderIdentity``, ``leaseDurationSeconds`` (int), ``acquireTime`` and ``renewTime``
  (RFC 3339 with microseconds, UTC, informational only) and ``leaseTransitions`` (+1 on each change of holder).
- A Lease held by someone else is taken over only once the holder has not renewed for its
  ``leaseDurationSeconds``, measured on OUR monotonic clock from the moment WE first saw its current record
  (client-go's observed-record trick: the moment the GET's answer arrived, never when it was sent, so a GET
  that froze cannot age a record it returns fresh): the other's wall clock and the timestamps it wrote are never
  trusted.
  An empty ``holderIdentity`` (a released Lease) can be taken at once.
- Every write is a PUT carrying the ``resourceVersion`` that was read (optimistic concurrency): a 409 means
  somebody else wrote first, so this round we are not the one who acquired/renewed.
- :meth:`LeaderElector.is_leader` turns False as soon as ``renew_deadline_s`` has passed since the start of
  the last successful acquire/renew (checked against the monotonic clock on every call, not only by the
  thread) and at once when a read shows another holder. Because ``renew_deadline_s < lease_duration_s``, the
  old leader stops acting before any other replica may take over.
- API errors are logged and count as a failed round; the background thread never raises.

Times are seconds; ``clock`` is a monotonic clock (``time.monotonic`` by default; tests inject a fake one).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from watchdog.adapters.kube import KubeClient, KubeError
from watchdog.core.model import LEASE_DURATION_S, RENEW_DEADLINE_S, RETRY_PERIOD_S

log = logging.getLogger("watchdog.adapters.leader")
JITTER = 1.2  # client-go's JitterFactor: retries while not leader wait retry_period * [1, 1 + JITTER)


def micro_time(now: dt.datetime | None = None) -> str:
    """RFC 3339 UTC with microseconds, as Kubernetes' MicroTime: ``2026-11-29T15:43:22.123456Z``."""
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """``HOSTNAME_RANDOM`` (hostname = the pod name in a cluster), unique per process start."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _record(lease: dict[str, Any]) -> tuple[Any, ...]:
    """The parts of a Lease spec whose change means the holder is alive (or changed)."""
    spec = lease.get("spec") or {}
    return tuple(spec.get(k) for k in ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime",
                                       "leaseTransitions"))


class LeaderElector:
    """Campaigns for the Lease ``namespace/name`` as ``identity``.

    ``lease_duration_s`` (15): how long others wait, after last seeing a change, before taking over.
    ``renew_deadline_s`` (10): how long the leader keeps acting without a successful renew.
    ``retry_period_s`` (2): time between attempts of the background thread.
    Raises ValueError unless ``lease_duration_s > renew_deadline_s > JITTER * retry_period_s > 0`` (client-go's
    rule) and ``namespace``/``name``/``identity`` are non-empty.
    """

    def __init__(self, kube: KubeClient, namespace: str, name: str,
                 identity: str | None = None, lease_duration_s: float = LEASE_DURATION_S,
                 renew_deadline_s: float = RENEW_DEADLINE_S, retry_period_s: float = RETRY_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not (lease_duration_s > renew_deadline_s > JITTER * retry_period_s > 0):
            raise ValueError(f"leader election needs lease duration ({lease_duration_s:g} s) > renew deadline "
                             f"({renew_deadline_s:g} s) > {JITTER:g} x retry period ({retry_period_s:g} s) > 0")
        identity = default_identity() if identity is None else identity
        if not namespace or not name or not identity:
            raise ValueError("leader election needs a namespace, a Lease name and an identity")
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.lease_duration_s, self.renew_deadline_s = lease_duration_s, renew_deadline_s
        self.retry_period_s, self.clock = retry_period_s, clock
        self._observed: tuple[Any, ...] | None = None  # the other's record as last seen ...
        self._observed_at = 0.0  # ... and when (our clock) we first saw it unchanged
        self._renewed_at: float | None = None  # start of our last successful acquire/renew; None: not leader
        self._term = 0  # how many times we acquired the Lease (each acquisition starts a new term)
        self._state_lock = threading.Lock()  # guards the three fields above
        self._step_lock = threading.Lock()  # one attempt at a time (thread, step(), stop())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._announced = False  # leadership as last logged

    def is_leader(self) -> bool:
        """True only while we hold the Lease and our last successful renew started < renew deadline ago
        (and :meth:`stop` has not been called since the last :meth:`start`)."""
        with self._state_lock:
            renewed = self._renewed_at
        return renewed is not None and not self._stop.is_set() and self.clock() - renewed < self.renew_deadline_s

    def term(self) -> int:
        """Our leadership term while :meth:`is_leader` (1 after the first acquisition of the Lease, 2 after the next,
        ...), 0 while not: a Lease lost and won back between two looks shows as a new number, where :meth:`is_leader`
        shows True twice (another leader may have acted in between: its deletions must be read back)."""
        with self._state_lock:
            term = self._term
        return term if self.is_leader() else 0

    def holds_for(self, seconds: float) -> bool:
        """The leadership fence: True only while :meth:`is_leader` and the Lease stays ours for more than
        ``seconds`` from now (the start of our last successful renew plus the lease duration: no other replica
        may take over before then, since each waits a full lease duration from when IT saw that renew). A write
        whose timeout is ``seconds`` is sent only under this, so it ends before another leader may act."""
        with self._state_lock:
            renewed = self._renewed_at
        return self.is_leader() and renewed is not None and renewed + self.lease_duration_s - self.clock() > seconds

    def step(self) -> bool:
        """One acquire-or-renew attempt (no thread). True when this attempt acquired or renewed the Lease.

        A False round does not end leadership by itself (only :meth:`is_leader`'s deadline or another holder
        does). Never raises: API errors are logged and give False.
        """
        with self._step_lock:
            try:
                ok = self._try_acquire_or_renew()
            except KubeError as exc:
                log.warning("leader election %s/%s: %s", self.namespace, self.name, exc)
                ok = False
            leader = self.is_leader()
            if leader != self._announced:  # also reports a loss by deadline that happened between attempts
                self._announced = leader
                log.warning("leader election %s/%s: %s is %s", self.namespace, self.name, self.identity,
                            "now the leader" if leader else "no longer the leader")
            return ok

    def _try_acquire_or_renew(self) -> bool:
        started = self.clock()
        lease = self.kube.get_lease(self.namespace, self.name)
        seen = self.clock()  # another's record is first seen when the answer arrives, not when the GET was sent
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(transitions=0, acquire_time=None)}
            return self._won(started, self.kube.create_lease(self.namespace, body), acquired=True)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        with self._state_lock:
            if _record(lease) != self._observed:
                self._observed, self._observed_at = _record(lease), seen
            if holder and holder != self.identity:
                self._renewed_at = None  # somebody else holds it: stop acting at once
                if seen < self._observed_at + _duration(spec, self.lease_duration_s):
                    return False
        ours = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if ours else 1)
        body = {"apiVersion": lease.get("apiVersion", "coordination.k8s.io/v1"), "kind": "Lease",
                "metadata": lease.get("metadata") or {},
                "spec": self._spec(transitions, spec.get("acquireTime") if ours else None)}
        return self._won(started, self.kube.replace_lease(self.namespace, self.name, body), acquired=not ours)

    def _spec(self, transitions: int, acquire_time: str | None) -> dict[str, Any]:
        stamp = micro_time()
        return {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, math.ceil(self.lease_duration_s)),
                "acquireTime": acquire_time or stamp, "renewTime": stamp, "leaseTransitions": transitions}

    def _won(self, started: float, lease: dict[str, Any], *, acquired: bool) -> bool:
        """Our write went through: a renew, or an acquisition: a new term when the Lease was not ours, or when we
        did not count ourselves leader (an acquisition whose answer was lost shows as ours at the next read)."""
        with self._state_lock:
            self._term += acquired or self._renewed_at is None
            self._observed, self._observed_at, self._renewed_at = _record(lease), started, started
        return True

    def start(self) -> None:
        """Campaign in a daemon thread: an attempt now, then every ``retry_period_s`` (with jitter while not
        leader). Idempotent while running."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            try:
                self.step()
            except Exception:  # never let the thread die; step() already handles API errors
                log.exception("leader election attempt failed")
            leader = self.is_leader()
            delay = self.retry_period_s * (1.0 if leader else 1.0 + random.random() * JITTER)

    def stop(self, timeout_s: float = 5.0, *, release: bool = True) -> None:
        """Stop campaigning; if we hold the Lease and ``release`` (no write of ours can still be in flight), give it
        up (empty holder, ``leaseDurationSeconds`` 1) so another replica takes over at once; else let it expire (the
        others wait the lease duration). :meth:`is_leader` (and with it the fence) is False from the first line on.
        Waits for an attempt in flight (at most about one request timeout). Never raises."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._step_lock:  # after any attempt still in flight
            with self._state_lock:
                self._renewed_at = None
                held = self._observed is not None and self._observed[0] == self.identity
            if held and release:
                self._release()
            elif held:
                log.warning("leader election %s/%s: not releasing the Lease (a write may still be in flight): "
                            "another replica takes over once it expires", self.namespace, self.name)

    def _release(self) -> None:
        try:
            lease = self.kube.get_lease(self.namespace, self.name)
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != self.identity:
                return
            stamp = micro_time()
            body = {"apiVersion": lease.get("apiVersion", "coordination.k8s.io/v1"), "kind": "Lease",
                    "metadata": lease.get("metadata") or {},
                    "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": stamp,
                             "renewTime": stamp, "leaseTransitions": int(spec.get("leaseTransitions") or 0)}}
            self.kube.replace_lease(self.namespace, self.name, body)
            log.warning("leader election %s/%s: %s released the Lease", self.namespace, self.name, self.identity)
        except KubeError as exc:
            log.warning("leader election %s/%s: release failed (others take over after the lease duration): %s",
                        self.namespace, self.name, exc)


def _duration(spec: dict[str, Any], default: float) -> float:
    """The holder's advertised ``leaseDurationSeconds`` (its promise), else our own setting."""
    value = spec.get("leaseDurationSeconds")
    return float(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

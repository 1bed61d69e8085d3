"""I/O: whether the API server accepts the watchdog's credentials, and fresh credentials after a 401.

:class:`Credentials` is told the HTTP status of every answer :class:`~watchdog.adapters.kube.KubeClient` gets.
The API server **refuses the credentials** while its last :data:`REFUSED_AFTER` answers were all 401
(Unauthorized: the token is not accepted at all) or 403 (Forbidden: RBAC) with none accepted since; any other
answer (2xx, or a 4xx such as 404, 409, 422, 429, all of which the API server gives only to a caller it
authenticated) ends it. No answer (timeout, connection error) and 5xx say nothing about credentials and change
nothing. One stray 403 -- an optional read the ClusterRole does not grant, such as pods/log or a DaemonSet in the
owner walk -- is followed by accepted answers in the same remediation and never counts as refused.
:meth:`Credentials.refusal` is that state as one line for ``/readyz``; listeners (the metrics) hear every refusal
and every change of the state.

Token rotation. The official client re-reads the in-cluster token file (the projected ServiceAccount token) at
most once a minute on its own (``load_incluster_config(try_refresh_token=True)``, its default: a
``refresh_api_key_hook``); a kubeconfig's ``token`` and ``tokenFile`` are read once, and an ``exec`` plugin is
run again only once its ``expirationTimestamp`` has passed. So on a 401 the configuration is loaded again from
where it came from (:meth:`Credentials.reload_with`: the token file, or the kubeconfig file with its
``tokenFile`` and ``exec`` plugin) at most once every :data:`RELOAD_EVERY_S`, and a token that changed is used
from the next request on (the refused one is not sent again). Client certificates live in the connection pool
built at start-up: a rotated kubeconfig client certificate needs a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kubernetes import client

log = logging.getLogger("watchdog.adapters.kube")

REFUSED_AFTER = 3  # this many refusals in a row, none accepted since: the API server refuses the credentials
RELOAD_EVERY_S = 10.0  # a 401 loads the configuration again at most this often
REFUSALS = {401: "Unauthorized", 403: "Forbidden"}
CHECK = {
    401: "check the ServiceAccount token (revoked? the ServiceAccount deleted and re-created? with --kubeconfig: "
         "its token, tokenFile or exec plugin), then RBAC",
    403: "check RBAC (the chart's ClusterRole and ClusterRoleBinding: kubectl auth can-i --list "
         "--as=system:serviceaccount:NAMESPACE:NAME), then the ServiceAccount token",
}

#: A listener: (the status of a refusal, or None when an accepted answer changed the state; refused now).
Listener = Callable[[int | None, bool], None]


class Credentials:
    """What the API server's answers say about this client's credentials (thread-safe). ``configuration``: the
    client's own, whose token :meth:`reload_with` replaces."""

    def __init__(self, configuration: client.Configuration | None = None, *, refused_after: int = REFUSED_AFTER,
                 reload_every_s: float = RELOAD_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        if refused_after < 1:
            raise ValueError(f"refused_after must be >= 1, got {refused_after}")
        self.configuration, self.refused_after, self.reload_every_s = configuration, refused_after, reload_every_s
        self.clock = clock
        self.reloads = 0  # configurations loaded again after a 401 whose token differed
        self.counts = dict.fromkeys(REFUSALS, 0)  # refusals so far by status
        self._streak = 0  # refusals since the last accepted answer
        self._statuses: set[int] = set()  # their statuses
        self._last: tuple[int, str] = (0, "")  # the newest refusal: status, request
        self._since: float | None = None  # when the streak began
        self._listeners: list[Listener] = []
        self._load: Callable[[], client.Configuration] | None = None
        self._loaded_at: float | None = None
        self._lock = threading.Lock()
        self._reloading = threading.Lock()

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` on every refusal and every change of :attr:`refused` from now on, after telling it
        the refusals so far (the informers may have been answered before the metrics were built)."""
        with self._lock:
            for status, count in self.counts.items():
                for _ in range(count):
                    listener(status, self.refused)
            listener(None, self.refused)
            self._listeners.append(listener)

    def reload_with(self, load: Callable[[], client.Configuration]) -> None:
        """After a 401, ``load()`` a fresh configuration (as at start-up) and take its token if it changed."""
        self._load = load

    @property
    def refused(self) -> bool:
        return self._streak >= self.refused_after

    def answered(self, what: str, status: int) -> None:
        """The API server answered request ``what`` with HTTP ``status`` (0: no answer)."""
        if status == 0 or status >= 500:
            return
        with self._lock:
            was = self.refused
            if status in REFUSALS:
                if not self._streak:
                    self._since = self.clock()
                self._streak += 1
                self.counts[status] += 1
                self._statuses.add(status)
                self._last = (status, what)
            elif self._streak:
                self._streak, self._since = 0, None
                self._statuses.clear()
            now, reason, listeners = self.refused, self._reason(), list(self._listeners)
        if status in REFUSALS or now != was:
            for listener in listeners:
                listener(status if status in REFUSALS else None, now)
        if now and not was:
            log.error("%s", reason, extra={"reason": "api_credentials"})
        elif was and not now:
            log.info("the API server accepts this watchdog's credentials again", extra={"reason": "api_credentials"})
        if status == 401:
            self._reload()

    def refusal(self) -> str | None:
        """One line naming the refusals and what to check while the API server refuses the credentials, else None."""
        with self._lock:
            return self._reason() if self.refused else None

    def _reason(self) -> str:
        if not self._streak:
            return ""
        status, what = self._last
        age = 0.0 if self._since is None else self.clock() - self._since
        statuses = " and ".join(f"{s} {REFUSALS[s]}" for s in sorted(self._statuses))
        return (f"the API server refuses this watchdog's credentials: its last {self._streak} answers were HTTP "
                f"{statuses}, none accepted for {age:.0f} s (last: {status} on {what}); {CHECK[status]}")[:500]

    def _reload(self) -> None:
        """Load the configuration again (rate-limited) and take its token when it differs from the one in use."""
        live, load = self.configuration, self._load
        if live is None or load is None or not self._reloading.acquire(blocking=False):
            return
        try:
            now = self.clock()
            if self._loaded_at is not None and now - self._loaded_at < self.reload_every_s:
                return
            self._loaded_at = now
            try:
                fresh = load()
            except Exception as exc:  # a kubeconfig or token file being rewritten, an exec plugin failing
                log.warning("after a 401, loading the Kubernetes credentials again failed: %s", exc,
                            extra={"reason": "api_credentials"})
                return
            if fresh.api_key == live.api_key and fresh.api_key_prefix == live.api_key_prefix:
                return
            if live.api_key and not fresh.api_key:  # the client's loader logs a failing exec plugin and goes on
                log.warning("after a 401, the Kubernetes credentials loaded again carry no token: keeping the one "
                            "in use", extra={"reason": "api_credentials"})
                return
            # The hook first: the old one (the client's own refresh) would put the old token back on every request.
            live.refresh_api_key_hook = fresh.refresh_api_key_hook
            live.api_key_prefix = dict(fresh.api_key_prefix)
            live.api_key = dict(fresh.api_key)
            self.reloads += 1
            log.warning("after a 401, the Kubernetes credentials were loaded again and the token changed: using the "
                        "new one from the next request on", extra={"reason": "api_credentials"})
        finally:
            self._reloading.release()

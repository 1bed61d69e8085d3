"""The run-time brake (docs/safety.md "The run-time brake"): one annotation, ``vllm-watchdog.io/paused``, on the
ConfigMap in the watchdog's own namespace named by the ``pauseConfigMap`` setting, read with one GET every cycle;
while it holds, every deletion is deferred by the policy's one pause rule (``paused``;
:func:`watchdog.core.policy.brake_from` says what a value means). A failed read (API error, RBAC) keeps the last
state read, and until the first read succeeds the brake holds (fail closed); a ConfigMap that does not exist is an
answer: no brake. Every change, the first failure of a streak and the recovery are logged once.
"""

from __future__ import annotations

import logging

from watchdog.adapters.kube import KubeError
from watchdog.adapters.logs import facts
from watchdog.controller.ports import KubeApi
from watchdog.core.policy import PAUSE_ANNOTATION, brake_from

log = logging.getLogger("watchdog.controller.brake")


class Brake:
    """Reads the brake annotation on ConfigMap ``namespace``/``name`` through ``kube``."""

    def __init__(self, kube: KubeApi, namespace: str, name: str) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.ref = f"configmap {namespace}/{name}"
        self.why: str | None = f"the run-time brake ({PAUSE_ANNOTATION} on {self.ref}) has not been read yet"
        self.known = False  # a read has succeeded since the start
        self.failing: str | None = None  # why the last read failed, None when it worked

    @property
    def on(self) -> bool:
        return self.why is not None

    def read(self) -> str | None:
        """GET the ConfigMap; return why the brake holds now, or None when it is off."""
        try:
            config_map = self.kube.get_config_map(self.namespace, self.name)
        except KubeError as exc:
            if self.failing is None:
                log.warning("cannot read the run-time brake (%s): keeping it %s until a read works", exc,
                            "ON" if self.on else "off", extra=facts(rule="paused", reason=str(exc)))
            self.failing = str(exc)
            return self.why
        if self.failing is not None:
            log.info("the run-time brake can be read again (%s)", self.ref, extra=facts(rule="paused"))
        self.failing = None
        on, value = brake_from(config_map)
        why = f"annotation {PAUSE_ANNOTATION}={value} on {self.ref}" if on else None
        if config_map is None and (self.why != why or not self.known):
            log.warning("the run-time brake's %s does not exist: no brake (set pauseConfigMap to an existing "
                        "ConfigMap to be able to pause without a restart)", self.ref, extra=facts(rule="paused"))
        if on and value is not None and value.strip().lower() != "true" and why != self.why:
            log.warning("%s=%r on %s is neither \"true\" nor \"false\": treated as \"true\" (the brake holds)",
                        PAUSE_ANNOTATION, value, self.ref, extra=facts(rule="paused"))
        if why != self.why or not self.known:
            if on:
                log.warning("run-time brake ON (%s): every deletion is deferred (rule paused) until it is "
                            "removed", why, extra=facts(rule="paused", reason=why))
            else:
                log.info("run-time brake off (%s has no %s=true): deletions follow the safety rails", self.ref,
                         PAUSE_ANNOTATION, extra=facts(rule="paused"))
        self.why, self.known = why, True
        return why

"""``--config FILE --target NAME`` of ``replay`` and ``check``: the target of a watchdog config file that judges a
pod, whose profile and effective policy the verb then uses (argument handling only; which target judges a pod
several targets match is :func:`watchdog.core.podpolicy.resolve_target`, the rule ``run`` uses; the policy rule is
:func:`watchdog.core.podpolicy.policy_of`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from watchdog.core.podpolicy import resolve_target
from watchdog.core.profiles import Profile, get_profile, target_profile

if TYPE_CHECKING:
    from watchdog.config.settings import Settings
    from watchdog.core.model import Target

#: The help of ``--target`` (check and replay say the same).
TARGET_HELP = ("with --config: which target (needed when the file has several); a pod whose labels several targets' "
               "podSelectors match: give each (--target a --target b), and the one run judges it by is used (the "
               "longest window)")


class Chosen(NamedTuple):
    """The config file, the target judging the pod, how it was chosen and what else may change it (for the verb's
    notes on stderr)."""

    config: Settings
    target: Target
    said: str
    hint: str = ""

    def notes(self, prog: str, policy: str) -> str:
        """The verb's note lines: the target and its effective ``policy``, then the hint, if any."""
        return f"{prog}: note: {self.said}: {policy}" + (f"\n{prog}: note: {self.hint}" if self.hint else "")


def chosen_target(config_path: str | None, target_names: list[str] | None, profile_given: bool) -> Chosen | None:
    """The config file and the target that judges a pod of the targets ``target_names`` (the only one when the file
    has one), or None without a file; raises ValueError (one line) on a bad file or target, targets whose profiles
    conflict (run does not judge such a pod), or a --profile given as well."""
    if config_path is None:
        if target_names:
            raise ValueError("--target needs --config FILE")
        return None
    if profile_given:
        raise ValueError("give either --profile or --config, not both")
    from watchdog.config.loader import ConfigError, load_config

    try:
        config = load_config(config_path, env={})
    except ConfigError as exc:
        raise ValueError(f"{config_path}: {exc.problems[0]}") from None
    targets = {t.name: t for t in config.targets}
    names = list(dict.fromkeys(target_names or ()))
    if not names and len(targets) > 1:
        raise ValueError(f"{config_path} has {len(targets)} targets: pick one with --target ({', '.join(targets)})")
    if unknown := [n for n in names if n not in targets]:
        raise ValueError(f"{config_path}: no target {unknown[0]!r} (targets: {', '.join(targets)})")
    matches = [t for t in config.targets if t.name in names] or list(config.targets)  # configuration order
    resolved = resolve_target(matches, config.base_policy)
    if resolved.target is None:
        raise ValueError(f"{config_path}: a pod {resolved.note}")
    said = f"target {resolved.target.name} of {config_path}" + (f" (a pod {resolved.note})" if resolved.note else "")
    hint = ("a pod that other targets' podSelectors match too is judged by the one with the longest window: give "
            "each with --target" if len(targets) > len(matches) else "")
    return Chosen(config, resolved.target, said, hint)


def profile_of(chosen: Chosen | None, profile_name: str | None) -> Profile:
    """The profile to read with: the chosen target's (custom profiles too), else ``--profile`` (default vllm)."""
    if chosen is None:
        return get_profile(profile_name or "vllm")
    target = chosen.target
    return target_profile(target.name, target.profile, target.metrics)

"""``--config FILE --target NAME`` of ``replay`` and ``check``: one target of a watchdog config file, whose profile
and effective policy the verb then uses (argument handling only; the policy rule is
:func:`watchdog.core.podpolicy.policy_of`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from watchdog.core.profiles import Profile, get_profile, target_profile

if TYPE_CHECKING:
    from watchdog.config.settings import Settings
    from watchdog.core.model import Target


def chosen_target(config_path: str | None, target_name: str | None,
                  profile_given: bool) -> tuple[Settings, Target] | None:
    """The config file and its target ``target_name`` (the only one when there is one), or None without a file;
    raises ValueError (one line) on a bad file or target, or a --profile given as well."""
    if config_path is None:
        if target_name is not None:
            raise ValueError("--target needs --config FILE")
        return None
    if profile_given:
        raise ValueError("give either --profile or --config, not both")
    from watchdog.config.loader import ConfigError, load_config

    try:
        config = load_config(config_path, env={})
    except ConfigError as exc:
        raise ValueError(f"{config_path}: {exc.problems[0]}") from None
    targets = config.targets
    names = [t.name for t in targets]
    if target_name is None and len(targets) > 1:
        raise ValueError(f"{config_path} has {len(targets)} targets: pick one with --target ({', '.join(names)})")
    chosen = targets[0] if target_name is None else next((t for t in targets if t.name == target_name), None)
    if chosen is None:
        raise ValueError(f"{config_path}: no target {target_name!r} (targets: {', '.join(names)})")
    return config, chosen


def profile_of(chosen: tuple[Settings, Target] | None, profile_name: str | None) -> Profile:
    """The profile to read with: the chosen target's (custom profiles too), else ``--profile`` (default vllm)."""
    if chosen is None:
        return get_profile(profile_name or "vllm")
    target = chosen[1]
    return target_profile(target.name, target.profile, target.metrics)

"""Environments for the demo: ``gym.make``, with MuJoCo's warnings sent to logging.

MuJoCo reports warnings by printing them and appending them to ``MUJOCO_LOG.TXT`` in
the working directory; every HalfCheetah or Hopper it builds warns that the model's
``settotalmass`` attribute is deprecated. :func:`make_env` installs a handler, once
per process, that passes MuJoCo's warnings to the ``mixreplay.demo.mujoco`` logger
instead (that known deprecation at DEBUG level), so a run leaves no file behind.
"""

from __future__ import annotations

import importlib.util
import logging

__all__ = ["make_env", "route_mujoco_warnings"]

log = logging.getLogger("mixreplay.demo.mujoco")

# warnings of the model files gymnasium ships, not of anything a run does
_KNOWN = ("compiler attribute 'settotalmass' is deprecated",)
_routed = False


def _on_warning(message: str) -> None:
    level = logging.DEBUG if message.startswith(_KNOWN) else logging.WARNING
    log.log(level, "MuJoCo: %s", message.strip())


def route_mujoco_warnings() -> None:
    """Send MuJoCo's warnings to logging (no print, no ``MUJOCO_LOG.TXT``); idempotent."""
    global _routed
    if _routed or importlib.util.find_spec("mujoco") is None:
        return
    import mujoco  # type: ignore[import-untyped]

    mujoco.set_mju_user_warning(_on_warning)
    _routed = True


def make_env(env_id: str, **kwargs):
    """``gymnasium.make(env_id, **kwargs)`` after :func:`route_mujoco_warnings`."""
    import gymnasium as gym

    route_mujoco_warnings()
    return gym.make(env_id, **kwargs)

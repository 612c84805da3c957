"""TorchRL's dataset prefixes that mixreplay opens through TorchRL itself.

TorchRL 0.14 registers ten dataset prefixes. ``minari:`` and ``d4rl:`` have native
mixreplay loaders; the eight others open through TorchRL's own dataset classes
(which download and preprocess as TorchRL does, into TorchRL's root) and come
back as TorchRL replay buffers, which mixreplay's buffers mix as foreign sources.
torchrl is imported only when one of these prefixes is used.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from mixreplay.errors import MissingDependencyError, require

__all__ = ["TORCHRL_DATASETS", "TorchRLDataset"]

#: prefix -> TorchRL's class, as TorchRL 0.14.1 registers it
#: (``torchrl/data/datasets/utils.py``), for the prefixes mixreplay has no loader of its own
TORCHRL_DATASETS: dict[str, str] = {
    "atari": "torchrl.data.datasets.atari_dqn:AtariDQNExperienceReplay",
    "atari_dqn": "torchrl.data.datasets.atari_dqn:AtariDQNExperienceReplay",
    "gen_dgrl": "torchrl.data.datasets.gen_dgrl:GenDGRLExperienceReplay",
    "lerobot": "torchrl.data.datasets.lerobot:LeRobotExperienceReplay",
    "openml": "torchrl.data.datasets.openml:OpenMLExperienceReplay",
    "openx": "torchrl.data.datasets.openx:OpenXExperienceReplay",
    "roboset": "torchrl.data.datasets.roboset:RobosetExperienceReplay",
    "vd4rl": "torchrl.data.datasets.vd4rl:VD4RLExperienceReplay",
}


def _init(cls: type) -> Any:
    """``cls.__init__``: TorchRL's classes have a metaclass whose ``__call__`` hides its signature."""
    return cls.__dict__.get("__init__") or next(
        c.__dict__["__init__"] for c in cls.__mro__ if "__init__" in c.__dict__
    )


class TorchRLDataset:
    """A TorchRL dataset class behind a mixreplay prefix (``"module:Class"``, imported on use).

    Calling it opens ``Class(name, **kwargs)`` with TorchRL's own keywords
    (``batch_size``, ``root``, ``download``, ...; see TorchRL's documentation of the
    class). ``batch_size`` may be left out, as with mixreplay's own loaders.

    Args:
        target: ``"module:Class"``.

    Examples:
        >>> from mixreplay.datasets.torchrl_sources import TorchRLDataset
        >>> TorchRLDataset("torchrl.data.datasets.openml:OpenMLExperienceReplay")
        TorchRLDataset('torchrl.data.datasets.openml:OpenMLExperienceReplay')
    """

    def __init__(self, target: str):
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"target must be 'module:Class', got {target!r}")
        self.target = target

    def resolve(self) -> type:
        """TorchRL's class (imports torchrl).

        Raises:
            MissingDependencyError: torchrl is not installed.
        """
        require("torchrl", "torchrl", f"TorchRL's dataset class {self.target}")
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def parameters(self) -> frozenset[str]:
        """The keyword arguments TorchRL's class names (not those it passes on unnamed)."""
        params = inspect.signature(_init(self.resolve())).parameters.values()
        return frozenset(
            p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        )

    def __call__(self, name: str, **kwargs: Any) -> Any:
        cls = self.resolve()
        param = inspect.signature(_init(cls)).parameters.get("batch_size")
        if "batch_size" not in kwargs and param is not None and param.default is param.empty:
            kwargs["batch_size"] = None  # TorchRL requires it; it only sets sample()'s default
        try:
            return cls(name, **kwargs)
        except ImportError as err:  # TorchRL checks its own optional packages when building
            raise MissingDependencyError(
                f"TorchRL's {cls.__name__} (for {name!r}) needs packages that are not installed: "
                f"{err}. Install the packages TorchRL names"
            ) from err

    def __repr__(self) -> str:
        return f"TorchRLDataset({self.target!r})"

"""The dataset registry: one entry per prefix, the only place a prefix lives.

``load_dataset("<prefix>:<name>", **kwargs)`` looks the prefix up and opens the
entry. An entry is one of:

- a :class:`~mixreplay.datasets.source.Source` subclass: the one loader
  (:mod:`mixreplay.datasets.loader`) converts it into the cache and maps the copy;
  ``mixreplay convert`` streams it, ``mixreplay inspect`` describes it;
- any other callable, a *factory*: called as ``factory(name, **kwargs)`` (TorchRL's
  convention); whatever it returns is a dataset (``mixreplay convert`` copies its
  rows, ``mixreplay inspect`` reads them);
- a ``"module:attribute"`` string naming either, imported when the prefix is first used.

Prefixes are lower-cased and stripped (``"Minari"`` is ``"minari"``). Built in:
``minari``, ``d4rl`` (:class:`~mixreplay.datasets.minari.MinariSource`,
:class:`~mixreplay.datasets.d4rl.D4RLSource`), ``memmap``
(:func:`~mixreplay.datasets.memmap.load_memmap`), and the eight other prefixes of
TorchRL's registry, opened through TorchRL's classes
(:mod:`mixreplay.datasets.torchrl_sources`). The command line, the cache and
``load_dataset`` read this registry and nothing else.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mixreplay._validate import describe
from mixreplay.errors import DatasetError, DatasetPrefixTakenError, MissingDependencyError

__all__ = [
    "DatasetEntry",
    "get_entry",
    "list_prefixes",
    "load_dataset",
    "parse_dataset_id",
    "register_dataset",
]

_PREFIX = re.compile(r"[a-z0-9][a-z0-9_-]*")
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


@dataclasses.dataclass(frozen=True)
class DatasetEntry:
    """What one prefix opens: a Source class, a factory, or a ``"module:attr"`` naming one.

    Examples:
        >>> from mixreplay.datasets import get_entry
        >>> entry = get_entry("d4rl")
        >>> entry
        DatasetEntry('d4rl', 'mixreplay.datasets.d4rl:D4RLSource')
        >>> entry.converts, entry.accepts("download"), get_entry("memmap").converts
        (True, True, False)
    """

    prefix: str
    target: Any

    def resolve(self) -> Any:
        """The Source class or factory (a lazy target is imported now).

        A TorchRL dataset class (``torchrl.data.datasets``) comes back wrapped in
        :class:`~mixreplay.datasets.torchrl_sources.TorchRLDataset`, which lets
        ``batch_size`` be left out and names TorchRL's missing packages.

        Raises:
            MissingDependencyError: the target is TorchRL's and torchrl is not installed.
            ImportError: a lazy target whose module cannot be imported (the type the
                import raised, as in TorchRL; the message names the prefix and the fix).
            AttributeError: a lazy target whose module lacks the attribute.
        """
        from mixreplay.datasets.torchrl_sources import TorchRLDataset

        if not isinstance(self.target, str):
            obj: Any = self.target
        else:
            module, _, attr = self.target.partition(":")
            if module.split(".")[0] == "torchrl" and importlib.util.find_spec("torchrl") is None:
                raise MissingDependencyError(
                    f"the dataset source {self.prefix!r} opens through TorchRL ({self.target}), "
                    'which is not installed. Install it with: pip install "mixreplay[torchrl]"'
                )
            try:
                obj = importlib.import_module(module)
                for part in attr.split("."):
                    obj = getattr(obj, part)
            except (ImportError, AttributeError) as err:
                # TorchRL's registry lets the import error through: keep its type
                message = (
                    f"dataset source {self.prefix!r} is registered as {self.target!r}, which "
                    f"cannot be imported ({type(err).__name__}: {err}); fix it with "
                    f"register_dataset({self.prefix!r}, ..., replace=True)"
                )
                if isinstance(err, ImportError):
                    raise type(err)(message, name=err.name, path=err.path) from err
                raise AttributeError(message) from err
        if isinstance(obj, type) and obj.__module__.startswith("torchrl.data.datasets"):
            return TorchRLDataset(f"{obj.__module__}:{obj.__qualname__}")
        return obj

    @property
    def converts(self) -> bool:
        """Whether the prefix reads a :class:`Source` (converted into the cache)."""
        from mixreplay.datasets.source import Source

        obj = self.resolve()
        return isinstance(obj, type) and issubclass(obj, Source)

    def accepts(self, keyword: str) -> bool:
        """Whether ``load_dataset`` with this prefix takes the keyword ``keyword``."""
        from mixreplay.datasets.loader import SOURCE_OPTIONS
        from mixreplay.datasets.source import Source
        from mixreplay.datasets.torchrl_sources import TorchRLDataset

        obj = self.resolve()
        if isinstance(obj, type) and issubclass(obj, Source):
            return keyword in SOURCE_OPTIONS or keyword in obj.option_names()
        if isinstance(obj, TorchRLDataset):
            return keyword in obj.parameters()
        try:
            params = inspect.signature(obj).parameters.values()
        except (TypeError, ValueError):  # a callable without a signature: it may take anything
            return True
        return any(
            p.kind is p.VAR_KEYWORD
            or (p.name == keyword and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
            for p in params
        )

    def open(self, name: str, **kwargs: Any) -> Any:
        """``load_dataset(f"{prefix}:{name}", **kwargs)``."""
        from mixreplay.datasets.loader import open_source

        obj = self.resolve()
        if self.converts:
            return open_source(obj, name, prefix=self.prefix, **kwargs)
        return obj(name, **kwargs)

    def source(self, name: str, **kwargs: Any) -> Any:
        """The :class:`Source` of ``<prefix>:<name>``, to stream it (``mixreplay convert``).

        Keyword Args:
            **kwargs: the row options (``keys``, ``rename``, ``dtype``, ``keep_infos``)
                and the source's own (``download``, ...).

        Raises:
            DatasetError: the prefix opens a factory, not a Source.
        """
        from mixreplay.datasets.loader import make_source

        if not self.converts:
            raise DatasetError(
                f"{self.prefix}: is opened by a factory ({self.describe()}), not a Source: "
                "open it with load_dataset and copy its rows"
            )
        return make_source(self.resolve(), name, prefix=self.prefix, **kwargs)

    def describe(self) -> str:
        """``"module:attr"`` of the target (or its repr)."""
        if isinstance(self.target, str):
            return self.target
        name = getattr(self.target, "__qualname__", None)
        module = getattr(self.target, "__module__", None)
        return f"{module}:{name}" if name and module else repr(self.target)

    def __repr__(self) -> str:
        return f"DatasetEntry({self.prefix!r}, {self.describe()!r})"


#: prefix -> what it opens: a Source class, a factory, or a lazy ``"module:attribute"``
#: string (TorchRL's name and layout for its registry: code reading TorchRL's reads this)
_DATASET_REGISTRY: dict[str, Any] = {}


def _normalize(prefix: Any) -> str:
    # a non-string is a bad prefix too (ValueError, as mixreplay has always raised here)
    out = prefix.lower().strip() if isinstance(prefix, str) else None
    if out is None or not _PREFIX.fullmatch(out):
        raise ValueError(
            "a dataset prefix must be a non-empty word of letters, digits, '_' or '-' "
            f"(no ':'), got {prefix!r}"
        )
    return out


def list_prefixes() -> list[str]:
    """Every registered prefix, sorted."""
    return sorted(_DATASET_REGISTRY)


def get_entry(prefix: str) -> DatasetEntry:
    """The registry entry of ``prefix`` (lower-cased and stripped).

    Raises:
        DatasetError: an unknown prefix (the message suggests the closest known one).
    """
    key = _normalize(prefix)
    if key not in _DATASET_REGISTRY:
        raise DatasetError(
            f"Unknown dataset source {prefix!r}{_closest(key)}; known prefixes: "
            f"{', '.join(list_prefixes())} (register your own with mixreplay.register_dataset)"
        )
    return DatasetEntry(key, _DATASET_REGISTRY[key])


def _closest(prefix: str) -> str:
    close = difflib.get_close_matches(prefix, list_prefixes(), n=1, cutoff=0.7)
    return f" (did you mean {close[0] + ':'!r}?)" if close else ""


def register_dataset(
    prefix: str, dataset: Callable[..., Any] | str, *, replace: bool = False
) -> None:
    """Make ``load_dataset(f"{prefix}:<name>", **kw)`` open ``<name>`` with ``dataset``.

    Args:
        prefix: letters, digits, ``_`` or ``-``; lower-cased and stripped.
        dataset: a :class:`~mixreplay.datasets.Source` subclass (converted into the
            cache, then mapped; also ``mixreplay convert``/``inspect`` stream it), a
            factory called as ``dataset(name, **kw)`` that returns a dataset (anything
            with ``sample(n)`` and ``len()``), or a ``"module:attribute"`` string
            naming either, imported when the prefix is first used (as in TorchRL).

    Keyword Args:
        replace: allow replacing an existing prefix (built-ins included).

    Raises:
        TypeError: ``dataset`` is neither callable nor a string.
        ValueError: a malformed prefix (or not a string) or ``"module:attribute"`` string.
        DatasetPrefixTakenError: the prefix is registered and ``replace`` is false (a
            ``KeyError``, as TorchRL raises, and a ``ValueError``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import ReplayBuffer, LazyTensorStorage, load_dataset, register_dataset
        >>> def zeros(rest, batch_size=None):
        ...     rb = ReplayBuffer(storage=LazyTensorStorage(int(rest)), batch_size=batch_size)
        ...     _ = rb.extend(TensorDict({"x": torch.zeros(int(rest), 2)}, [int(rest)]))
        ...     return rb
        >>> register_dataset("zeros", zeros, replace=True)
        >>> len(load_dataset("Zeros:8"))
        8
        >>> register_dataset("lazy", "mixreplay.datasets.memmap:load_memmap", replace=True)
    """
    key = _normalize(prefix)
    if isinstance(dataset, str):
        if not _TARGET.fullmatch(dataset):
            raise ValueError(
                f"a factory given as a string is 'module:attribute', got {dataset!r}; e.g. "
                "'my_package.datasets:MyDataset'"
            )
    elif not callable(dataset):
        raise TypeError(
            f"factory must be callable, got {describe(dataset)}; pass a Source class, a function "
            "returning a dataset, or a 'module:attribute' string naming one"
        )
    if key in _DATASET_REGISTRY and not replace:
        raise DatasetPrefixTakenError(
            f"dataset prefix {key!r} is already registered; pass replace=True to override it "
            f"(it opens {DatasetEntry(key, _DATASET_REGISTRY[key]).describe()})"
        )
    _DATASET_REGISTRY[key] = dataset


def _prefix_hint(text: str) -> str:
    """A likely full ID for an ID written without a prefix, as ``" (did you mean ...?)"``."""
    from mixreplay.datasets.d4rl_urls import D4RL_PATHS

    path = Path(text).expanduser()
    guess = None
    try:
        if path.is_dir() and (path / "metadata.json").is_file():
            guess = "memmap"
        elif path.suffix in (".hdf5", ".h5") or path.is_file():
            guess = "d4rl"
    except OSError:  # a name too long for a path, say
        pass
    if guess is None and text in D4RL_PATHS:
        guess = "d4rl"
    elif guess is None and re.fullmatch(r"[\w-]+(/[\w-]+)*-v\d+", text):
        guess = "minari"
    return f" (did you mean '{guess}:{text}'?)" if guess else ""


def parse_dataset_id(dataset_id: str) -> tuple[DatasetEntry, str]:
    """``"<prefix>:<name>"`` as ``(entry, name)``.

    Raises:
        TypeError: ``dataset_id`` is not a string.
        DatasetError: no prefix, an unknown prefix (with the closest known one), or no name.
    """
    if not isinstance(dataset_id, str):
        raise TypeError(
            f"dataset_id must be a string like 'minari:<id>', got {describe(dataset_id)}"
        )
    prefix, sep, name = dataset_id.partition(":")
    if not sep or not prefix.strip():
        raise DatasetError(
            f"dataset ID {dataset_id!r} must be prefixed with its source: write it as "
            f"'<prefix>:<name>' with a prefix among {', '.join(list_prefixes())}"
            f"{_prefix_hint(dataset_id)}"
        )
    try:
        entry = get_entry(prefix)
    except ValueError as err:  # a malformed prefix is unknown too
        if isinstance(err, DatasetError):
            raise
        raise DatasetError(
            f"Unknown dataset source {prefix!r} in {dataset_id!r}; known prefixes: "
            f"{', '.join(list_prefixes())}"
        ) from None
    if not name:
        raise DatasetError(
            f"dataset_id {dataset_id!r} names no dataset after the prefix; write it as "
            f"'{entry.prefix}:<name>'"
        )
    return entry, name


def load_dataset(dataset_id: str, **kwargs: Any) -> Any:
    """Open the offline dataset named ``"<prefix>:<name>"``.

    Args:
        dataset_id: e.g. ``"minari:mujoco/hopper/expert-v0"``, ``"d4rl:hopper-medium-v2"``,
            ``"memmap:/data/hopper"``; the prefix is case-insensitive.
        **kwargs: the loader's options (``batch_size``, ``generator``, ``keys``,
            ``dtype``, ``download``, ...; see :mod:`mixreplay.datasets.loader`), or the
            factory's for a prefix registered with one.

    Raises:
        DatasetError: no prefix, an unknown prefix (the message suggests the closest
            known one), or a dataset that cannot be read; ``DatasetNotFoundError``
            when it does not exist.

    Examples:
        >>> from mixreplay import load_dataset
        >>> load_dataset("minar:mujoco/hopper/expert-v0")
        Traceback (most recent call last):
        ...
        mixreplay.errors.DatasetError: Unknown dataset source 'minar' (did you mean 'minari:'?); ...
    """
    entry, name = parse_dataset_id(dataset_id)
    return entry.open(name, **kwargs)


def _register_builtins() -> None:
    from mixreplay.datasets.torchrl_sources import TORCHRL_DATASETS

    register_dataset("d4rl", "mixreplay.datasets.d4rl:D4RLSource")
    register_dataset("memmap", "mixreplay.datasets.memmap:load_memmap")
    register_dataset("minari", "mixreplay.datasets.minari:MinariSource")
    for prefix, target in TORCHRL_DATASETS.items():  # lazy strings, as TorchRL registers them
        register_dataset(prefix, target)


_register_builtins()

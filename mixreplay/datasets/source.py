"""The contract of a dataset source that mixreplay converts into its memmap cache.

A :class:`Source` reads one foreign dataset (a Minari dataset, a D4RL file, your
own format) as TED rows, chunk by chunk. Registering a ``Source`` subclass under
a prefix (:func:`~mixreplay.register_dataset`) is all it takes for that prefix to
load through the one loader (:mod:`mixreplay.datasets.loader`: key selection,
renaming, dtypes, the cache, TorchRL's keywords), to be converted by
``mixreplay convert`` and described by ``mixreplay inspect``.

A subclass implements :meth:`~Source.files` (what fingerprints the source),
:meth:`~Source.read` (the rows) and, optionally, :meth:`~Source.rows_hint`
(for progress) and :meth:`~Source.slug` (the cache directory's readable name).
Options of its own are keyword-only arguments of ``__init__``: the loader passes
each one the user gives through, and refuses any keyword no part of it takes.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tensordict import TensorDictBase

from mixreplay._validate import check_bool
from mixreplay.datasets.transforms import RowPolicy

__all__ = ["CONVERTER_VERSION", "Source", "digest", "files_fingerprint"]

#: Bumped whenever a loader would produce different rows from the same source:
#: every cache written by an older converter is then converted again.
CONVERTER_VERSION = 1

#: the keyword arguments of ``Source.__init__`` that the loader fills itself
_BASE_PARAMETERS = frozenset({"self", "name", "prefix", "policy", "keep_infos", "dedup_next"})


def digest(obj: Any) -> str:
    """A short hash of a JSON-able object (sorted keys): cache keys and fingerprints."""
    return hashlib.blake2b(json.dumps(obj, sort_keys=True).encode(), digest_size=8).hexdigest()


def files_fingerprint(paths: Iterable[Path], options: dict[str, Any]) -> str:
    """A cheap fingerprint: path, size and mtime (ns) of each file, plus ``options``."""
    entries = []
    for p in sorted(Path(p) for p in paths):
        st = p.stat()
        entries.append([str(p), st.st_size, st.st_mtime_ns])
    return digest({"files": entries, "options": options, "converter": CONVERTER_VERSION})


@functools.cache
def _option_names(init: Any) -> frozenset[str]:
    params = inspect.signature(init).parameters.values()
    return frozenset(
        p.name
        for p in params
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in _BASE_PARAMETERS
    )


class Source(ABC):
    """A dataset that converts into mixreplay's cache: what one registry prefix reads.

    Args:
        name: the ID after the prefix (``"mujoco/hopper/expert-v0"``, a file path).

    Keyword Args:
        prefix: the registry prefix the source was opened under (part of its ID
            and of its cache directory).
        policy: key selection, renaming and dtypes applied to every chunk.
        keep_infos: keep the source's per-step infos.
        dedup_next: convert into the memmap format that stores each next value once
            (read from the following row of the same episode; see
            :func:`~mixreplay.datasets.memmap.write_memmap_dataset`). The rows read
            back are the same; a pixel dataset takes about half the disk. It keys the
            cache: a plain and a dedup conversion are two entries.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import load_dataset, register_dataset
        >>> from mixreplay.datasets import Source
        >>> class Ramp(Source):
        ...     '''``ramp:<n>``: n rows whose observation is the row number.'''
        ...     def __init__(self, name, *, scale: float = 1.0, **base):
        ...         super().__init__(name, **base)
        ...         self.scale = scale
        ...         self.options = {**self.options, "scale": scale}
        ...     def files(self):
        ...         return []  # nothing on disk: the fingerprint is the options alone
        ...     def read(self):
        ...         n = int(self.name)
        ...         obs = torch.arange(n, dtype=torch.float64).unsqueeze(-1) * self.scale
        ...         rows = TensorDict({"observation": obs}, [n])
        ...         return iter([self.policy.apply_td(rows, where=self.source_id)]), [0], {}
        >>> register_dataset("ramp", Ramp, replace=True)
        >>> ds = load_dataset("ramp:5", scale=2.0)  # converted once into the cache
        >>> ds[:]["observation"].squeeze(-1).tolist(), ds.schema["observation"].dtype
        ([0.0, 2.0, 4.0, 6.0, 8.0], torch.float32)
    """

    def __init__(
        self,
        name: str,
        *,
        prefix: str,
        policy: RowPolicy | None = None,
        keep_infos: bool = False,
        dedup_next: bool = False,
    ):
        self.prefix = prefix
        self.name = name
        self.policy = policy if policy is not None else RowPolicy()
        self.keep_infos = bool(keep_infos)
        #: write the converted copy with each next value stored once
        self.dedup_next = check_bool(dedup_next, "dedup_next")
        #: every option that changes the rows or their layout on disk, JSON-able: part of
        #: the cache key (``dedup_next`` only when set, so plain entries keep their keys)
        self.options: dict[str, Any] = {"keep_infos": self.keep_infos, **self.policy.to_json()}
        if self.dedup_next:
            self.options["dedup_next"] = True

    @classmethod
    def option_names(cls) -> frozenset[str]:
        """The keyword options this source class takes beyond the loader's own."""
        return _option_names(cls.__init__)

    @property
    def source_id(self) -> str:
        """``"<prefix>:<name>"``, as recorded in the cache's metadata."""
        return f"{self.prefix}:{self.name}"

    def slug(self) -> str:
        """A readable name for the cache directory (the cache key disambiguates)."""
        return self.name

    @abstractmethod
    def files(self) -> Sequence[Path]:
        """The files whose sizes and mtimes fingerprint the source."""

    def rows_hint(self) -> int | None:
        """Rows in the source (for a progress bar), if cheap to know."""
        return None

    @abstractmethod
    def read(self) -> tuple[Iterator[TensorDictBase], list[int], dict[str, Any]]:
        """``(chunks, episode_starts, info)``: ``[n]`` TED chunks in order, the first
        converted row of each episode, and JSON-able facts kept in the metadata."""

    def fingerprint(self) -> str:
        """Changes whenever the source's files or the row-changing options change."""
        return files_fingerprint(self.files(), self.options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source_id!r}, options={self.options!r})"

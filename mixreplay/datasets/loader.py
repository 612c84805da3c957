"""The one loader of every convertible source, and the options every dataset shares.

``load_dataset("<prefix>:<name>", **options)`` on a prefix registered with a
:class:`~mixreplay.datasets.source.Source` class (``minari:``, ``d4rl:``, your own)
runs :func:`open_source`: the options below are handled here, once, for every
source; what remains goes to the source class (``download=`` for ``minari:`` and
``d4rl:``, ...), and a keyword nobody takes is refused naming the ones that exist.

Rows (applied while converting; part of the cache key, each variant has its own copy):
    ``keys``, ``rename``, ``dtype`` (``"float32"`` by default): see
    :class:`~mixreplay.datasets.transforms.RowPolicy`. ``keep_infos``: keep the
    source's per-step infos.

The layout on disk (part of the cache key too; the rows read back are the same):
    ``dedup_next`` (``False`` by default): store each next value once, read from the
    following row of the same episode (pixel datasets take about half the disk).

The cache:
    ``cache_dir`` (default ``$MIXREPLAY_DATA_DIR``, else ``~/.cache/mixreplay``);
    ``refresh`` (convert again even if the cache is current); ``progress``
    (called with the row count of each converted chunk).

The dataset (forwarded to :class:`~mixreplay.OfflineDataset`):
    ``batch_size``, ``generator``, ``sampler``, ``transform``.

TorchRL's dataset keywords, each with mixreplay's meaning:
    ``root``: where the converted copy is kept (TorchRL keeps its own memory-mapped
    copy there): the same as ``cache_dir``. ``download``: see the source
    (``d4rl:`` downloads a missing file by default, ``minari:`` only when asked;
    ``"force"`` downloads again). ``split_trajs=False`` is what mixreplay does
    (rows stay flat; ``episode_starts`` marks trajectories); ``True`` is refused:
    sample trajectories with ``sampler=SliceSampler(...)``. ``writer=None`` and
    ``collate_fn=None`` are accepted (a dataset is read-only; batches are
    TensorDicts); ``prefetch`` and ``pin_memory`` are forwarded to the dataset
    when it takes them, else refused naming the buffer that does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mixreplay._validate import check_bool
from mixreplay.datasets.options import DATASET_OPTIONS, TORCHRL_DATASET_OPTIONS, dataset_options
from mixreplay.datasets.source import Source
from mixreplay.datasets.transforms import RowPolicy

__all__ = [
    "CACHE_OPTIONS",
    "LAYOUT_OPTIONS",
    "ROW_OPTIONS",
    "SOURCE_OPTIONS",
    "make_source",
    "open_source",
]

#: what the rows are: part of the cache key
ROW_OPTIONS = ("keys", "rename", "dtype", "keep_infos")
#: how the rows are stored: part of the cache key
LAYOUT_OPTIONS = ("dedup_next",)
#: how the cache is used
CACHE_OPTIONS = ("cache_dir", "root", "refresh", "progress")
#: every option the loader itself takes from a convertible source's keywords
SOURCE_OPTIONS = (
    ROW_OPTIONS + LAYOUT_OPTIONS + CACHE_OPTIONS + DATASET_OPTIONS + TORCHRL_DATASET_OPTIONS
)


def make_source(
    cls: type[Source],
    name: str,
    *,
    prefix: str,
    keys: Any = None,
    rename: Any = None,
    dtype: Any = "float32",
    keep_infos: bool = False,
    dedup_next: bool = False,
    **options: Any,
) -> Source:
    """Build the source ``cls`` for ``<prefix>:<name>`` with the row options and its own.

    Raises:
        TypeError: a keyword neither the loader nor ``cls`` takes (the message lists
            every keyword that is taken).
        DatasetError: the row options do not form a valid policy.
    """
    check_bool(keep_infos, "keep_infos")
    check_bool(dedup_next, "dedup_next")
    accepted = cls.option_names()
    unknown = sorted(set(options) - accepted)
    if unknown:
        every = sorted(accepted | set(SOURCE_OPTIONS))
        raise TypeError(
            f"load_dataset('{prefix}:...') got an unexpected keyword argument {unknown[0]!r}; "
            f"the {prefix}: loader takes {', '.join(every)}"
        )
    policy = RowPolicy(keys=keys, rename=rename, dtype=dtype)
    return cls(
        name, prefix=prefix, policy=policy, keep_infos=keep_infos, dedup_next=dedup_next, **options
    )


def open_source(cls: type[Source], name: str, *, prefix: str, **kwargs: Any) -> Any:
    """Open ``<prefix>:<name>`` read by ``cls``: converted once into the cache, then mapped.

    Keyword Args:
        prefix: the registry prefix.
        **kwargs: the options of the module docstring, and those of ``cls``.

    Returns:
        A read-only :class:`~mixreplay.OfflineDataset`.
    """
    from mixreplay.datasets.cache import load_cached

    loader = f"load_dataset('{prefix}:...')"
    dataset = dataset_options(kwargs, loader)
    cache_dir = kwargs.pop("cache_dir", None)
    root = kwargs.pop("root", None)
    if root is not None and cache_dir is not None:
        raise TypeError(
            f"{loader}: root and cache_dir are the same option (where the converted copy is "
            "kept; root is TorchRL's name for it): pass one of them"
        )
    refresh = check_bool(kwargs.pop("refresh", False), "refresh")
    progress = kwargs.pop("progress", None)
    source = make_source(cls, name, prefix=prefix, **kwargs)
    where = root if root is not None else cache_dir
    return load_cached(
        source,
        cache_dir=None if where is None else Path(where),
        refresh=refresh,
        progress=progress,
        **dataset,
    )

"""One persistence layer for everything mixreplay writes to disk.

Checkpoints (:mod:`mixreplay.checkpoint`) and memory-mapped datasets
(:mod:`mixreplay.datasets.memmap`) are both *containers*: a directory holding
``metadata.json`` and one raw file per tensor. This package owns how such a
directory is written and read, so the two cannot drift apart:

- :mod:`~mixreplay.persist.atomic`: a directory appears whole or not at all
  (temp sibling, fsync of files and directory, swap, recovery of a swap a killed
  writer left half done, removal of dead writers' temp directories); writers swap
  one at a time under a lock, and readers (:func:`read_directory`) change nothing
  and read one version whole while writers replace it;
- :mod:`~mixreplay.persist.container`: the format (tensors as raw little-endian
  files with dtype, shape, size and CRC-32 in the JSON; the JSON itself
  checksummed), and format versions with migrations, so that a file written by an
  older mixreplay loads, or says exactly why not.

The callers own their state: this layer never imports a buffer or a dataset.
"""

from mixreplay.persist.atomic import atomic_directory, fsync_path, read_directory, recover
from mixreplay.persist.container import (
    Format,
    TensorStream,
    decode_tensors,
    encode_tensors,
    map_tensor,
    read_container,
    read_tensor,
    write_metadata,
)

__all__ = [
    "Format",
    "TensorStream",
    "atomic_directory",
    "decode_tensors",
    "encode_tensors",
    "fsync_path",
    "map_tensor",
    "read_container",
    "read_directory",
    "read_tensor",
    "recover",
    "write_metadata",
]

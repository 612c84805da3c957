"""Scaling out: a replay buffer in a Ray actor, fed by collectors anywhere in a cluster.

- :class:`RayReplayBuffer` starts an actor that builds the buffer (offline data
  is opened where the actor runs) and is a picklable handle with the buffer's
  methods; :meth:`RayReplayBuffer.sample` prefetches.
- :class:`RayWriter` (``handle.writer()``) batches a collector's rows into few
  messages and does not wait for each.
- :mod:`~mixreplay.distributed.wire` is the packed wire format,
  :mod:`~mixreplay.distributed.host` what runs inside the actor,
  :mod:`~mixreplay.distributed.pipeline` the handle's ordered prefetching threads,
  :mod:`~mixreplay.distributed.limited` how a rate-limited buffer's callers wait (the
  actor never does).

Importing this package does not import Ray; creating a buffer does, and needs
``pip install "mixreplay[ray]"``. See ``docs/scaling.md``.
"""

from mixreplay.distributed.handle import RayReplayBuffer
from mixreplay.distributed.writer import RayWriter
from mixreplay.errors import BufferActorError, WriterEvictedError

__all__ = ["BufferActorError", "RayReplayBuffer", "RayWriter", "WriterEvictedError"]

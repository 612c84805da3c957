"""What runs inside the buffer's Ray actor: the buffer, its wire endpoints, its checkpoints.

:class:`BufferHost` is a plain class; :class:`~mixreplay.distributed.RayReplayBuffer`
wraps it with ``ray.remote``. It builds the buffer itself, from the arguments it
is given, so an offline dataset named by ID or path is opened (memory-mapped) on
the actor's node and never travels.

Checkpoints: with ``checkpoint_dir``, every ``checkpoint_every`` rows received
the buffer is saved with its own :meth:`dumps` into ``<checkpoint_dir>/buffer``
(atomic: a crash mid-save leaves the previous checkpoint). An actor that Ray
*restarts* (``max_restarts``) rebuilds the buffer from the same arguments and
loads that checkpoint: JSON and raw tensor bytes, no pickled code. A fresh actor
refuses a directory that already holds a checkpoint unless ``resume=True``, so
one run never silently continues, or overwrites, another's.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import warnings
from pathlib import Path

from tensordict import TensorDict, TensorDictBase

from mixreplay.distributed.wire import LayoutCache, Packer
from mixreplay.errors import CheckpointError

__all__ = ["BufferHost"]

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "buffer"


def _was_restarted() -> bool:
    """Whether Ray restarted this actor after a crash (False outside a Ray actor)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # noqa: BLE001 - not an actor, or an API change: treat as a fresh start
        return False


def has_checkpoint(path: Path) -> bool:
    """A checkpoint at ``path``, or its previous copy left by a save cut between two renames."""
    return path.exists() or path.with_name(f".{path.name}.old").exists()


class BufferHost:
    """The buffer and the endpoints the handle calls (runs in the actor process).

    Args:
        buffer_cls: the buffer class (or any factory) to call.
        args, kwargs: its arguments.

    Keyword Args:
        checkpoint_dir: where checkpoints go (on the actor's node), or ``None``.
        checkpoint_every: save after this many rows received (``None``: only on
            :meth:`checkpoint`).
        resume: a fresh actor loads the checkpoint already in ``checkpoint_dir``.
        restarted: whether this is a restart (default: asked from Ray).

    A failure while building the buffer or loading its checkpoint is kept and
    raised by every call, so the handle shows the real error, not a dead actor.
    """

    def __init__(
        self,
        buffer_cls,
        args=(),
        kwargs=None,
        *,
        checkpoint_dir=None,
        checkpoint_every: int | None = None,
        resume: bool = False,
        restarted: bool | None = None,
    ):
        self._error: BaseException | None = None
        self.buffer = None
        self._layouts = LayoutCache()
        self._out = Packer()
        self._path = None if checkpoint_dir is None else Path(checkpoint_dir) / CHECKPOINT_NAME
        self._every = checkpoint_every
        self._since_save = 0
        self._rows_received = 0
        self._saves = 0
        self._restored_from: str | None = None
        self._restarted = _was_restarted() if restarted is None else restarted
        try:
            self.buffer = buffer_cls(*args, **(kwargs or {}))
            self._restore(resume)
        except Exception as err:  # noqa: BLE001 - re-raised by every call
            log.exception(
                "could not build %s in the buffer actor",
                getattr(buffer_cls, "__name__", buffer_cls),
            )
            self._error = err

    def _restore(self, resume: bool) -> None:
        path = self._path
        if path is None or not has_checkpoint(path):
            return
        if not (self._restarted or resume):
            raise CheckpointError(
                f"checkpoint_dir {str(path.parent)!r} already holds a checkpoint ({path}); pass "
                "resume=True to continue from it, or give an empty checkpoint_dir for a new run"
            )
        self.buffer.loads(path)
        self._restored_from = str(path)
        log.warning(
            "buffer actor %s: restored %d rows from %s",
            "restarted" if self._restarted else "resumed",
            len(self.buffer),
            path,
        )

    def _buf(self):
        if self._error is not None:
            raise self._error
        return self.buffer

    # -- introspection -----------------------------------------------------------------------

    def describe(self) -> dict:
        """The buffer's class, public methods and properties, and :meth:`info`."""
        buf = self._buf()
        cls = type(buf)
        methods, properties = [], []
        for name in dir(cls):
            if name.startswith("_"):
                continue
            attr = inspect.getattr_static(cls, name)
            if isinstance(attr, property):
                properties.append(name)
            elif callable(attr) or isinstance(attr, (staticmethod, classmethod)):
                methods.append(name)
        properties += [n for n in vars(buf) if not n.startswith("_") and n not in properties]
        return {
            "buffer": cls.__qualname__,
            "module": cls.__module__,
            "methods": sorted(methods),
            "properties": sorted(properties),
            **self.info(),
        }

    def info(self) -> dict:
        """Where the actor runs and what it did: pid, node, restarts, checkpoints."""
        node_id = None
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            node_id = ray.get_runtime_context().get_node_id()
        return {
            "pid": os.getpid(),
            "node_id": node_id,
            "restarted": self._restarted,
            "restored_from": self._restored_from,
            "checkpoint": None if self._path is None else str(self._path),
            "checkpoints_saved": self._saves,
            "rows_received": self._rows_received,
        }

    def length(self) -> int:
        return len(self._buf())

    # -- rows in and out ---------------------------------------------------------------------

    def extend_packed(self, key: str, words, kwargs: dict | None = None, want_index: bool = True):
        """Unpack ``words`` with the schema ``key`` and extend the buffer with them.

        Returns the slots written (numpy) or, without ``want_index``, the row count.
        """
        buf = self._buf()
        td = self._layouts.unpack(key, words, writable=False)
        index = buf.extend(td, **(kwargs or {}))
        n = td.batch_size[0]
        self._wrote(n)
        if not want_index:
            return n
        return index.cpu().numpy() if hasattr(index, "cpu") else index

    def sample_packed(self, batch_size: int | None, return_info: bool):
        """One batch as ``(key, words, batch_shape, info)``: packed rows and the info's leaves.

        A transform's output that is not a TensorDict travels as it is (``key`` None).
        """
        out = self._buf().sample(batch_size, return_info=return_info)
        batch, info = out if return_info else (out, None)
        if info is not None:
            info = {
                k: v.cpu().numpy() for k, v in info.items(include_nested=True, leaves_only=True)
            }
        if not isinstance(batch, TensorDictBase) or batch.batch_dims == 0:
            return None, batch, None, info
        shape = tuple(batch.batch_size)
        flat = batch if batch.batch_dims == 1 else batch.reshape(-1)
        words = self._out.pack(flat)  # the layout is rebuilt only when the batch's schema changes
        return self._out.key, words, shape, info

    # -- anything else -----------------------------------------------------------------------

    def call(self, name: str, args: tuple = (), kwargs: dict | None = None):
        """Call the buffer's method ``name``."""
        return _sendable(f"rb.{name}(...)", getattr(self._buf(), name)(*args, **(kwargs or {})))

    def get(self, name: str):
        """Read the buffer's attribute or property ``name``."""
        return _sendable(f"rb.{name}", getattr(self._buf(), name))

    # -- checkpoints -------------------------------------------------------------------------

    def _wrote(self, n: int) -> None:
        self._rows_received += n
        if self._every is not None:
            self._since_save += n
            if self._since_save >= self._every:
                self.checkpoint()

    def checkpoint(self) -> str:
        """Save the buffer to ``<checkpoint_dir>/buffer`` now; return that path."""
        buf = self._buf()
        if self._path is None:
            raise ValueError(
                "this buffer actor has no checkpoint_dir; create it with "
                "RayReplayBuffer(..., checkpoint_dir='/abs/path') or call rb.dumps(path)"
            )
        buf.dumps(self._path)
        self._saves += 1
        self._since_save = 0
        return str(self._path)


def _sendable(what: str, value):
    """``value``, unless it is a buffer or storage: those stay in the actor."""
    from mixreplay.buffers.replay import ReplayBuffer
    from mixreplay.storages.base import Storage

    if isinstance(value, (ReplayBuffer, Storage)):
        raise TypeError(
            f"{what} is a {type(value).__name__} that lives in the buffer actor and cannot be sent "
            "back (its rows stay where they are); use the handle's own methods instead "
            "(rb.sample(), len(rb), rb.state_dict(), rb.dumps(path))"
        )
    return value


def info_tensordict(info: dict | None, batch: int) -> TensorDict | None:
    """Rebuild the ``info`` TensorDict from :meth:`BufferHost.sample_packed`'s leaves."""
    if info is None:
        return None
    import torch

    td = TensorDict({}, batch_size=[batch])
    for key, value in info.items():
        td.set(
            key,
            torch.from_numpy(value) if value.flags.writeable else torch.from_numpy(value.copy()),
        )
    return td

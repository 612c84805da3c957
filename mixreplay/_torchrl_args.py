"""TorchRL replay-buffer arguments that mixreplay does not support, and what to do instead.

A TorchRL user's ``ReplayBuffer(..., writer=..., sample_unit=...)`` must not be
silently accepted with a different meaning: each argument below is accepted
only with TorchRL's default (which means what mixreplay does anyway) and
refused otherwise with an error that names it and the mixreplay way.
"""

from __future__ import annotations

from typing import Any

from mixreplay._validate import TorchRLTable, check_torchrl_kwargs

__all__ = [
    "UNSUPPORTED",
    "UNSUPPORTED_METHODS",
    "UNSUPPORTED_STORAGE_METHODS",
    "check_storage_args",
    "check_unsupported",
    "unsupported_method",
]


def _is_torchrl(value: Any, *names: str) -> bool:
    cls = type(value)
    return cls.__name__ in names and cls.__module__.split(".")[0] == "torchrl"


def round_robin_writer(value: Any) -> bool:
    """Whether ``value`` is TorchRL's default writer (or a factory of one): ring order, which
    is how mixreplay writes. A compilable one (``compilable=True``) is not."""
    if value is None:
        return True
    if isinstance(value, type) or (callable(value) and not hasattr(value, "extend")):
        try:  # TorchRL also takes a writer class or factory, and builds it
            value = value()
        except Exception:
            return False
    return _is_torchrl(value, "RoundRobinWriter", "TensorDictRoundRobinWriter") and not getattr(
        value, "_compilable", False
    )


#: argument -> (values that mean mixreplay's own behaviour, or a test of the value; the
#: mixreplay way)
UNSUPPORTED: TorchRLTable = {
    "writer": (
        round_robin_writer,
        "rows are written in ring order: TorchRL's RoundRobinWriter() is accepted (not a "
        "compilable=True one); for writers on other processes use mixreplay.distributed",
    ),
    "sample_unit": (
        (None,),
        "for runs of consecutive steps use sampler=SliceSampler(slice_len=...)",
    ),
    "dim_extend": (
        (None, 0),
        "an ndim=1 storage is extended along dim 0: flatten a [N, T] batch first with "
        "data.reshape(-1) (each env's steps stay consecutive), or build the storage with "
        "ndim=2 (then dim_extend=1 writes [n_envs, T] batches as TorchRL does)",
    ),
    "checkpointer": ((None,), "save and restore with rb.dumps(path) / rb.loads(path)"),
    "consume_after_n_samples": (
        (None,),
        "for one pass over the rows use sampler=SamplerWithoutReplacement()",
    ),
    "compilable": (
        (None, False),
        "mixreplay's sample/extend run eagerly (no torch.compile support); "
        "compile the learner's own step instead",
    ),
    "service_backend": (("direct",), "host the buffer in a Ray actor with mixreplay.distributed"),
    "service_backend_options": (
        (None,),
        "host the buffer in a Ray actor with mixreplay.distributed",
    ),
    "transport": (("auto", "direct"), "host the buffer in a Ray actor with mixreplay.distributed"),
    "transport_options": ((None,), "host the buffer in a Ray actor with mixreplay.distributed"),
    "priority_key": (
        ("td_error",),
        "a ReplayBuffer does not read priorities from batches: build a "
        "TensorDictReplayBuffer(priority_key=...) (its batches carry 'index' for "
        "update_tensordict_priority), or call rb.update_priority(info['index'], priority) "
        "with the info of sample(return_info=True)",
    ),
}


def check_unsupported(owner: str, kwargs: dict) -> None:
    """Raise ``TypeError`` for a keyword that is unknown, or a TorchRL one with a value mixreplay lacks."""
    check_torchrl_kwargs(owner, kwargs, UNSUPPORTED)


#: TorchRL storage arguments -> (accepted values, the mixreplay way)
STORAGE_ARGS: TorchRLTable = {
    "compilable": (
        (None, False),
        "mixreplay's storages run eagerly (no torch.compile support); compile the learner's "
        "own step instead",
    ),
    # mixreplay packs every row into one tensor: its storage is always consolidated
    "consolidated": ((False, True), ""),
    # True: the ring is shared between processes from the start (mixreplay.storages.shared)
    "shared_init": ((False, True), ""),
    # only meaningful with shared_init=True, like in TorchRL
    "cleanup_memmap": ((True, False), ""),
}


def check_storage_args(owner: str, kwargs: dict) -> None:
    """Refuse TorchRL storage arguments mixreplay cannot honour (``TypeError``, naming the way)."""
    check_torchrl_kwargs(owner, kwargs, STORAGE_ARGS)


_SERVICE = "mixreplay has no replay service of its own; host the buffer in a Ray actor with mixreplay.distributed"
_CONDITIONAL = (
    "mixreplay does not track row generations; write stored rows in place with "
    "rb[index] = ..., rb.set_at_(key, value, index) or rb.update_(td)"
)

#: TorchRL ReplayBuffer methods and attributes mixreplay lacks -> the mixreplay way
UNSUPPORTED_METHODS: dict[str, str] = {
    "as_remote": _SERVICE,
    "start": _SERVICE,
    "is_alive": _SERVICE,
    "service_backend": _SERVICE,
    "client": _SERVICE,
    "shutdown": _SERVICE,
    "synchronize": _SERVICE,
    "set_rng": "pass generator= (a torch.Generator or an int seed) when building the buffer",
    "set_storage": "build a new buffer with the storage",
    "set_writer": "build a new buffer",
    "set_sampler": "build a new buffer with the sampler",
    "can_sample": "check len(rb) > 0 (or rb.available() for slices) before sampling",
    "submit_update_if_present": _CONDITIONAL,
    "update_if_present": _CONDITIONAL,
    "register_save_hook": "checkpoints have no hooks; post-process after rb.loads(path)",
    "register_load_hook": "checkpoints have no hooks; post-process after rb.loads(path)",
    "query": "filter trajectories from rb.storage.to_tensordict() (or use SliceSampler for slices)",
    "mark_update": "mixreplay does not track staleness; weight rows with a PrioritizedSampler",
    "update_tensordict_priority": "it is TensorDictReplayBuffer's (its batches carry 'index'); "
    "here call rb.update_priority(info['index'], priority) with the info of "
    "sample(return_info=True)",
}


_HOOKS = "storages have no save/load hooks; post-process after loads(path)"

#: TorchRL Storage methods and attributes mixreplay's storages lack -> the mixreplay way
UNSUPPORTED_STORAGE_METHODS: dict[str, str] = {
    "register_save_hook": _HOOKS,
    "register_load_hook": _HOOKS,
    "checkpointer": "storages save with dumps(path) / loads(path) in mixreplay's own format",
    "attach": "samplers are attached by the buffer that holds the storage",
    "flatten": "a mixreplay storage keeps its rows flat: storage[:].reshape(-1) gives an "
    "ndim=2 grid's elements as rows",
}


def unsupported_method(owner: str, name: str) -> AttributeError:
    """The error for a TorchRL attribute ``name`` that ``owner`` lacks (or Python's usual one)."""
    way = UNSUPPORTED_METHODS.get(name)
    if way is None:
        return AttributeError(f"{owner!r} object has no attribute {name!r}")
    return AttributeError(f"{owner} has no TorchRL {name!r}: {way}")

"""TorchRL replay-buffer arguments that mixreplay does not support, and what to do instead.

A TorchRL user's ``ReplayBuffer(..., writer=..., shared=True)`` must not be
silently accepted with a different meaning: each argument below is accepted
only with TorchRL's default (which means what mixreplay does anyway) and
refused otherwise with an error that names it and the mixreplay way.
"""

from __future__ import annotations

__all__ = ["UNSUPPORTED", "check_unsupported"]

#: argument -> (values that mean mixreplay's own behaviour, the mixreplay way)
UNSUPPORTED: dict[str, tuple[tuple, str]] = {
    "writer": ((None,), "rows are written in ring order (TorchRL's RoundRobinWriter); for "
               "writers on other processes use mixreplay.distributed"),
    "collate_fn": ((None,), "batches are always TensorDicts; convert them with transform=..."),
    "sample_unit": ((None,), "for runs of consecutive steps use sampler=SliceSampler(slice_len=...)"),
    "dim_extend": ((None, 0), "extend rows along dim 0; flatten a [N, T] batch first with "
                   "data.reshape(-1) (each env's steps stay consecutive)"),
    "checkpointer": ((None,), "save and restore with rb.dumps(path) / rb.loads(path)"),
    "consume_after_n_samples": ((None,), "for one pass over the rows use "
                                "sampler=SamplerWithoutReplacement()"),
    "shared": ((False,), "threads share a buffer as is (each storage has a lock); for other "
               "processes or machines host it in a Ray actor (mixreplay.distributed)"),
    "compilable": ((None, False), "mixreplay's sample/extend are not traced by torch.compile; "
                   "compile the learner's own step instead"),
    "delayed_init": ((None, False), "storages already allocate on the first write; build the "
                     "buffer in the process that uses it (or use mixreplay.distributed)"),
    "service_backend": (("direct",), "host the buffer in a Ray actor with mixreplay.distributed"),
    "service_backend_options": ((None,), "host the buffer in a Ray actor with mixreplay.distributed"),
    "transport": (("auto", "direct"), "host the buffer in a Ray actor with mixreplay.distributed"),
    "transport_options": ((None,), "host the buffer in a Ray actor with mixreplay.distributed"),
    "priority_key": (("td_error",), "mixreplay does not read priorities from batches: call "
                     "rb.update_priority(info['index'], priority) with the info of "
                     "sample(return_info=True)"),
}


def check_unsupported(owner: str, kwargs: dict) -> None:
    """Raise ``TypeError`` for a keyword that is unknown, or a TorchRL one with a value mixreplay lacks."""
    for name, value in kwargs.items():
        if name not in UNSUPPORTED:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")
        accepted, way = UNSUPPORTED[name]
        if not any(value is a or (type(value) is type(a) and value == a) for a in accepted):
            raise TypeError(
                f"{owner} does not support TorchRL's {name}={value!r} (only "
                f"{' / '.join(repr(a) for a in accepted)}, which is mixreplay's behaviour); {way}"
            )

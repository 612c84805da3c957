"""TorchRL sampler arguments: accepted where they mean what mixreplay does, refused otherwise.

A TorchRL user's ``SliceSampler(strict_length=False)`` must not be silently taken
with another meaning: each argument of TorchRL 0.14's samplers that mixreplay does
not implement is accepted only with values that mean mixreplay's own behaviour,
and refused otherwise with a ``TypeError`` that names it and the mixreplay way
(the rule of :mod:`mixreplay._torchrl_args`, for samplers).
"""

from __future__ import annotations

from mixreplay._validate import TorchRLTable, check_torchrl_kwargs

__all__ = ["Table", "check_torchrl_kwargs"]

#: argument -> (values that mean mixreplay's own behaviour, the mixreplay way)
Table = TorchRLTable

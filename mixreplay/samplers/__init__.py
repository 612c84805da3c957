"""Samplers: which rows of one source a batch draws.

A sampler is a small strategy object attached to one source. It draws row
indices with the generator it is handed (never the global RNG), so the buffer
that owns the generator owns the randomness and can save it::

    Sampler               the protocol
    ├── RandomSampler     uniform, with replacement (the default; replacement=False
    │                     builds a SamplerWithoutReplacement, as in TorchRL)
    ├── PrioritizedSampler  proportional to priority, with importance weights
    ├── SliceSampler      runs of consecutive steps inside one episode
    │   └── SliceSamplerWithoutReplacement  ... each episode once per epoch
    └── SamplerWithoutReplacement  epochs: every row once, in chunks of one permutation
"""

from mixreplay.samplers.base import Sampler
from mixreplay.samplers.prioritized import PrioritizedSampler
from mixreplay.samplers.slice import SliceSampler
from mixreplay.samplers.slice_without_replacement import SliceSamplerWithoutReplacement
from mixreplay.samplers.uniform import RandomSampler
from mixreplay.samplers.without_replacement import SamplerWithoutReplacement

__all__ = [
    "PrioritizedSampler",
    "RandomSampler",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
]

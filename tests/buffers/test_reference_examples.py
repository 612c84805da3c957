"""The reference's two docstring examples, with only the import changed to mixreplay."""

import doctest

REFERENCE_BUFFER = """
>>> import torch
>>> from tensordict import TensorDict
>>> from mixreplay import (
...     OfflineToOnlineReplayBuffer, ReplayBuffer, LazyTensorStorage)
>>> offline = ReplayBuffer(storage=LazyTensorStorage(1000))
>>> _ = offline.extend(TensorDict({"observation": torch.randn(1000, 4)}, [1000]))
>>> rb = OfflineToOnlineReplayBuffer(
...     offline_dataset=offline,
...     online_capacity=500,
...     offline_fraction=0.5,
...     batch_size=32,
... )
>>> _ = rb.extend(TensorDict({"observation": torch.randn(10, 4)}, [10]))
>>> rb.sample(32).batch_size
torch.Size([32])
"""

REFERENCE_PREFILL = """
>>> import torch
>>> from tensordict import TensorDict
>>> from mixreplay import ReplayBuffer, LazyTensorStorage
>>> from mixreplay import (
...     prefill_replay_buffer)
>>> dataset = ReplayBuffer(storage=LazyTensorStorage(500))
>>> _ = dataset.extend(TensorDict({"obs": torch.randn(500, 4)}, [500]))
>>> online_rb = ReplayBuffer(storage=LazyTensorStorage(10_000))
>>> _ = prefill_replay_buffer(online_rb, dataset, n_samples=200)
>>> len(online_rb)
200
"""


def _run(text: str) -> doctest.TestResults:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, "reference", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    return runner.summarize(verbose=False)


def test_reference_buffer_example():
    result = _run(REFERENCE_BUFFER)
    assert result.failed == 0 and result.attempted == 8


def test_reference_prefill_example():
    result = _run(REFERENCE_PREFILL)
    assert result.failed == 0 and result.attempted == 9

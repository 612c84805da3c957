# The docstrings of TorchRL's replay-buffer classes that mixreplay exports under their
# names, verbatim, for their examples to run against mixreplay (test_rb_docstrings.py).
# Origin:
#   repository  https://github.com/pytorch/rl
#   paths       torchrl/data/replay_buffers/replay_buffers.py, torchrl/data/replay_buffers/storages.py
#   commit      373c31a85b30be19e5e1db5c466f25d15522ac98 (branch prepare-0.14, "Bump 0.14.0")
# Changes: none (the text of each docstring, as inspect.cleandoc gives it).
#
# TorchRL's LICENSE file (MIT), which its notice requires to travel with the code:
#
# MIT License
#
# Copyright (c) Meta Platforms, Inc. and affiliates.
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all
# copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
# SOFTWARE.
#
"""TorchRL docstrings (text, not code: their examples run in test_rb_docstrings.py)."""

DOCSTRINGS = {
    # torchrl/data/replay_buffers/replay_buffers.py, line 181
    "ReplayBuffer": r"""A generic, composable replay buffer class.

See also :class:`~torchrl.trainers.algorithms.configs.ReplayBufferConfig`.

Keyword Args:
    storage (Storage, Callable[[], Storage], optional): the storage to be used.
        If a callable is passed, it is used as constructor for the storage.
        If none is provided a default :class:`~torchrl.data.replay_buffers.ListStorage` with
        ``max_size`` of ``1_000`` will be created.
    sampler (Sampler, Callable[[], Sampler], optional): the sampler to be used.
        If a callable is passed, it is used as constructor for the sampler.
        If none is provided, a default :class:`~torchrl.data.replay_buffers.RandomSampler`
        will be used.
    sample_unit (SampleUnit, optional): expands the anchors selected by
        the sampler into the records of the batch (see
        :class:`~torchrl.data.replay_buffers.SampleUnit`). ``None``
        (default) is equivalent to
        :class:`~torchrl.data.replay_buffers.Transition`: every anchor is
        one transition and classic behavior is preserved.
    writer (Writer, Callable[[], Writer], optional): the writer to be used.
        If a callable is passed, it is used as constructor for the writer.
        If none is provided a default :class:`~torchrl.data.replay_buffers.RoundRobinWriter`
        will be used.
    collate_fn (callable, optional): merges a list of samples to form a
        mini-batch of Tensor(s)/outputs.  Used when using batched
        loading from a map-style dataset. The default value will be decided
        based on the storage type.
    pin_memory (bool): whether pin_memory() should be called on the rb
        samples.
    prefetch (int, optional): number of next batches to be prefetched
        using multithreading. Defaults to None (no prefetching).
    transform (Transform or Callable[[Any], Any], optional): Transform to be executed when
        :meth:`sample` is called.
        To chain transforms use the :class:`~torchrl.envs.Compose` class.
        Transforms should be used with :class:`tensordict.TensorDict`
        content. A generic callable can also be passed if the replay buffer
        is used with PyTree structures (see example below).
        Unlike storages, writers and samplers, transform constructors must
        be passed as separate keyword argument :attr:`transform_factory`,
        as it is impossible to distinguish a constructor from a transform.
    transform_factory (Callable[[], Callable], optional): a factory for the
        transform. Exclusive with :attr:`transform`.
    batch_size (int, optional): the batch size to be used when sample() is
        called.

        .. note::
          The batch-size can be specified at construction time via the
          ``batch_size`` argument, or at sampling time. The former should
          be preferred whenever the batch-size is consistent across the
          experiment. If the batch-size is likely to change, it can be
          passed to the :meth:`sample` method. This option is
          incompatible with prefetching (since this requires to know the
          batch-size in advance) as well as with samplers that have a
          ``drop_last`` argument.

    dim_extend (int, optional): indicates the dim to consider for
        extension when calling :meth:`extend`. Defaults to ``storage.ndim-1``.
        When using ``dim_extend > 0``, we recommend using the ``ndim``
        argument in the storage instantiation if that argument is
        available, to let storages know that the data is
        multi-dimensional and keep consistent notions of storage-capacity
        and batch-size during sampling.

        .. important:: When using a collector with ``trajs_per_batch``,
            trajectories are written as flat 1-D sequences of variable
            length.  Do not set ``dim_extend > 0`` or ``ndim >= 2`` in
            this case — the storage must be 1-dimensional.

        .. note:: This argument has no effect on :meth:`add` and
            therefore should be used with caution when both :meth:`add`
            and :meth:`extend` are used in a codebase. For example:

                >>> data = torch.zeros(3, 4)
                >>> rb = ReplayBuffer(
                ...     storage=LazyTensorStorage(10, ndim=2),
                ...     dim_extend=1)
                >>> # these two approaches are equivalent:
                >>> for d in data.unbind(1):
                ...     rb.add(d)
                >>> rb.extend(data)

    generator (torch.Generator, optional): a generator to use for sampling.
        Using a dedicated generator for the replay buffer can allow a fine-grained control
        over seeding, for instance keeping the global seed different but the RB seed identical
        for distributed jobs.
        Defaults to ``None`` (global default generator).

        .. warning:: As of now, the generator has no effect on the transforms.
    consume_after_n_samples (int, optional): if provided, sampled items are
        removed from the sampleable set after they have been returned this
        many times. The default value of ``None`` keeps the standard replay
        buffer behavior. Passing ``1`` makes each item available for a
        single sample before it is consumed.
    shared (bool, optional): whether the buffer will be shared using multiprocessing or not.
        Defaults to ``False``.
    compilable (bool, optional): whether the writer is compilable.
        If ``True``, the writer cannot be shared between multiple processes.
        Defaults to ``False``.
    delayed_init (bool, optional): whether to initialize storage, writer, sampler and transform
        the first time the buffer is used rather than during construction.
        This is useful when the replay buffer needs to be pickled and sent to remote workers,
        particularly when using transforms with modules that require gradients.
        If not specified, defaults to ``True`` when ``transform_factory`` is provided,
        and ``False`` otherwise.
    service_backend (str): deployment backend, either ``"direct"`` or
        ``"ray"``. Defaults to ``"direct"``.
    service_backend_options (dict, optional): Ray initialization options.
        Accepted keys are ``ray_init_config`` and ``remote_config``.
    transport (str, optional): physical transport used by a remote replay
        owner. ``"auto"`` selects the backend default. Defaults to
        ``"auto"``.
    transport_options (dict, optional): options for the selected transport.
        For ``transport="distributed"``, ``backend`` selects ``"gloo"``
        or ``"nccl"``. TensorDict layouts are bound lazily on first use.

Examples:
    >>> import torch
    >>>
    >>> from torchrl.data import ReplayBuffer, ListStorage
    >>>
    >>> torch.manual_seed(0)
    >>> rb = ReplayBuffer(
    ...     storage=ListStorage(max_size=1000),
    ...     batch_size=5,
    ... )
    >>> # populate the replay buffer and get the item indices
    >>> data = range(10)
    >>> indices = rb.extend(data)
    >>> # sample will return as many elements as specified in the constructor
    >>> sample = rb.sample()
    >>> print(sample)
    tensor([4, 9, 3, 0, 3])
    >>> # Passing the batch-size to the sample method overrides the one in the constructor
    >>> sample = rb.sample(batch_size=3)
    >>> print(sample)
    tensor([9, 7, 3])
    >>> # one cans sample using the ``sample`` method or iterate over the buffer
    >>> for i, batch in enumerate(rb):
    ...     print(i, batch)
    ...     if i == 3:
    ...         break
    0 tensor([7, 3, 1, 6, 6])
    1 tensor([9, 8, 6, 6, 8])
    2 tensor([4, 3, 6, 9, 1])
    3 tensor([4, 4, 1, 9, 9])

Replay buffers accept *any* kind of data. Not all storage types
will work, as some expect numerical data only, but the default
:class:`~torchrl.data.ListStorage` will:

Examples:
    >>> torch.manual_seed(0)
    >>> buffer = ReplayBuffer(storage=ListStorage(100), collate_fn=lambda x: x)
    >>> indices = buffer.extend(["a", 1, None])
    >>> buffer.sample(3)
    [None, 'a', None]

The :class:`~torchrl.data.replay_buffers.TensorStorage`, :class:`~torchrl.data.replay_buffers.LazyMemmapStorage`
and :class:`~torchrl.data.replay_buffers.LazyTensorStorage` also work
with any PyTree structure (a PyTree is a nested structure of arbitrary depth made of dicts,
lists or tuples where the leaves are tensors) provided that it only contains
tensor data.

Examples:
    >>> from torch.utils._pytree import tree_map
    >>> def transform(x):
    ...     # Zeros all the data in the pytree
    ...     return tree_map(lambda y: y * 0, x)
    >>> rb = ReplayBuffer(storage=LazyMemmapStorage(100), transform=transform)
    >>> data = {
    ...     "a": torch.randn(3),
    ...     "b": {"c": (torch.zeros(2), [torch.ones(1)])},
    ...     30: -torch.ones(()),
    ... }
    >>> rb.add(data)
    >>> # The sample has a similar structure to the data (with a leading dimension of 10 for each tensor)
    >>> s = rb.sample(10)
    >>> # let's check that our transform did its job:
    >>> def assert0(x):
    >>>     assert (x == 0).all()
    >>> tree_map(assert0, s)""",
    # torchrl/data/replay_buffers/replay_buffers.py, line 997
    "ReplayBuffer.stats": r"""Returns a cheap, serializable snapshot of the buffer's operational state.

The snapshot only contains scalar counters and gauges. It never
includes the storage content, does not modify the buffer state and is
safe to call concurrently with writes and samples. Cumulative
counters such as ``write_count`` are meant to be converted into rates
by an external monitor such as
:class:`~torchrl.record.loggers.monitoring.LoggerMonitor`.

Calling this method on an uninitialized buffer does not trigger its
initialization; an empty snapshot with ``initialized=False`` is
returned instead (``capacity`` is still reported when the storage
already advertises it).

Returns:
    A dictionary with the following entries:

    - ``"size"``: current number of elements in the buffer (mirrors ``len(buffer)``);
    - ``"write_count"``: total number of items written through ``add`` and
      ``extend`` (``0`` for writers that do not track writes, such as
      :class:`~torchrl.data.replay_buffers.writers.ImmutableDatasetWriter`);
    - ``"prefetch_queue_size"``: number of pending prefetched batches;
    - ``"initialized"``: whether the buffer components are initialized;
    - ``"capacity"``: maximum number of elements the storage can hold
      (only present when the storage advertises a ``max_size``);
    - ``"utilization"``: ``size / capacity`` (only present alongside ``capacity``).

    Remote clients backed by the distributed transport report a subset
    of these entries (``size`` and ``write_count``).

Examples:
    >>> import torch
    >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
    >>> rb = ReplayBuffer(storage=LazyTensorStorage(10))
    >>> rb.extend(torch.arange(5))
    >>> snapshot = rb.stats()
    >>> print(snapshot["size"], snapshot["write_count"], snapshot["capacity"])
    5 5 10""",
    # torchrl/data/replay_buffers/replay_buffers.py, line 1704
    "ReplayBuffer.dumps": r"""Saves the replay buffer on disk at the specified path.

Args:
    path (Path or str): path where to save the replay buffer.

Examples:
    >>> import tempfile
    >>> import tqdm
    >>> from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer
    >>> from torchrl.data.replay_buffers.samplers import PrioritizedSampler, RandomSampler
    >>> import torch
    >>> from tensordict import TensorDict
    >>> # Build and populate the replay buffer
    >>> S = 1_000_000
    >>> sampler = PrioritizedSampler(S, 1.1, 1.0)
    >>> # sampler = RandomSampler()
    >>> storage = LazyMemmapStorage(S)
    >>> rb = TensorDictReplayBuffer(storage=storage, sampler=sampler)
    >>>
    >>> for _ in tqdm.tqdm(range(100)):
    ...     td = TensorDict({"obs": torch.randn(100, 3, 4), "next": {"obs": torch.randn(100, 3, 4)}, "td_error": torch.rand(100)}, [100])
    ...     rb.extend(td)
    ...     sample = rb.sample(32)
    ...     rb.update_tensordict_priority(sample)
    >>> # save and load the buffer
    >>> with tempfile.TemporaryDirectory() as tmpdir:
    ...     rb.dumps(tmpdir)
    ...
    ...     sampler = PrioritizedSampler(S, 1.1, 1.0)
    ...     # sampler = RandomSampler()
    ...     storage = LazyMemmapStorage(S)
    ...     rb_load = TensorDictReplayBuffer(storage=storage, sampler=sampler)
    ...     rb_load.loads(tmpdir)
    ...     assert len(rb) == len(rb_load)""",
    # torchrl/data/replay_buffers/replay_buffers.py, line 2220
    "ReplayBuffer.append_transform": r"""Appends transform at the end.

Transforms are applied in order when `sample` is called.

Args:
    transform (Transform): The transform to be appended

Keyword Args:
    invert (bool, optional): if ``True``, the transform will be inverted (forward calls will be called
        during writing and inverse calls during reading). Defaults to ``False``.

Example:
    >>> rb = ReplayBuffer(storage=LazyMemmapStorage(10), batch_size=4)
    >>> data = TensorDict({"a": torch.zeros(10)}, [10])
    >>> def t(data):
    ...     data += 1
    ...     return data
    >>> rb.append_transform(t, invert=True)
    >>> rb.extend(data)
    >>> assert (data == 1).all()""",
    # torchrl/data/replay_buffers/storages.py, line 760
    "TensorStorage": r"""A storage for tensors and tensordicts.

Args:
    storage (tensor or TensorDict): the data buffer to be used.
    max_size (int): size of the storage, i.e. maximum number of elements stored
        in the buffer.

Keyword Args:
    device (torch.device, optional): device where the sampled tensors will be
        stored and sent. Default is :obj:`torch.device("cpu")`.
        If "auto" is passed, the device is automatically gathered from the
        first batch of data passed. This is not enabled by default to avoid
        data placed on GPU by mistake, causing OOM issues.
    ndim (int, optional): the number of dimensions to be accounted for when
        measuring the storage size. For instance, a storage of shape ``[3, 4]``
        has capacity ``3`` if ``ndim=1`` and ``12`` if ``ndim=2``.
        Defaults to ``1``.

        .. important:: When using a collector with ``trajs_per_batch``,
            keep the default ``ndim=1``.  ``trajs_per_batch`` writes
            variable-length trajectories as flat 1-D sequences, which is
            incompatible with a storage that expects a fixed second
            dimension (``ndim >= 2``).

    compilable (bool, optional): whether the storage is compilable.
        If ``True``, the writer cannot be shared between multiple processes.
        Defaults to ``False``.

Examples:
    >>> data = TensorDict({
    ...     "some data": torch.randn(10, 11),
    ...     ("some", "nested", "data"): torch.randn(10, 11, 12),
    ... }, batch_size=[10, 11])
    >>> storage = TensorStorage(data)
    >>> len(storage)  # only the first dimension is considered as indexable
    10
    >>> storage.get(0)
    TensorDict(
        fields={
            some data: Tensor(shape=torch.Size([11]), device=cpu, dtype=torch.float32, is_shared=False),
            some: TensorDict(
                fields={
                    nested: TensorDict(
                        fields={
                            data: Tensor(shape=torch.Size([11, 12]), device=cpu, dtype=torch.float32, is_shared=False)},
                        batch_size=torch.Size([11]),
                        device=None,
                        is_shared=False)},
                batch_size=torch.Size([11]),
                device=None,
                is_shared=False)},
        batch_size=torch.Size([11]),
        device=None,
        is_shared=False)
    >>> storage.set(0, storage.get(0).zero_()) # zeros the data along index ``0``

This class also supports tensorclass data.

Examples:
    >>> from tensordict import tensorclass
    >>> @tensorclass
    ... class MyClass:
    ...     foo: torch.Tensor
    ...     bar: torch.Tensor
    >>> data = MyClass(foo=torch.randn(10, 11), bar=torch.randn(10, 11, 12), batch_size=[10, 11])
    >>> storage = TensorStorage(data)
    >>> storage.get(0)
    MyClass(
        bar=Tensor(shape=torch.Size([11, 12]), device=cpu, dtype=torch.float32, is_shared=False),
        foo=Tensor(shape=torch.Size([11]), device=cpu, dtype=torch.float32, is_shared=False),
        batch_size=torch.Size([11]),
        device=None,
        is_shared=False)""",
    # torchrl/data/replay_buffers/storages.py, line 1517
    "LazyTensorStorage": r"""A pre-allocated tensor storage for tensors and tensordicts.

Args:
    max_size (int): size of the storage, i.e. maximum number of elements stored
        in the buffer.

Keyword Args:
    device (torch.device, optional): device where the sampled tensors will be
        stored and sent. Default is :obj:`torch.device("cpu")`.
        If "auto" is passed, the device is automatically gathered from the
        first batch of data passed. This is not enabled by default to avoid
        data placed on GPU by mistake, causing OOM issues.
    ndim (int, optional): the number of dimensions to be accounted for when
        measuring the storage size. For instance, a storage of shape ``[3, 4]``
        has capacity ``3`` if ``ndim=1`` and ``12`` if ``ndim=2``.
        Defaults to ``1``.

        .. important:: When using a collector with ``trajs_per_batch``,
            keep the default ``ndim=1``.  ``trajs_per_batch`` writes
            variable-length trajectories as flat 1-D sequences, which is
            incompatible with a storage that expects a fixed second
            dimension (``ndim >= 2``).
    compilable (bool, optional): whether the storage is compilable.
        If ``True``, the writer cannot be shared between multiple processes.
        Defaults to ``False``.
    consolidated (bool, optional): if ``True``, the storage will be consolidated after
        its first expansion. Defaults to ``False``.
    shared_init (bool, optional): if ``True``, enables multiprocess coordination
        during storage initialization. First process initializes with memmap,
        others wait and load from the shared memmap. Defaults to ``False``.
    cleanup_memmap (bool, optional): if ``True`` and ``shared_init=True``,
        the temporary memmap will be deleted after initialization and the
        storage will operate in RAM. Defaults to ``True``.

Examples:
    >>> data = TensorDict({
    ...     "some data": torch.randn(10, 11),
    ...     ("some", "nested", "data"): torch.randn(10, 11, 12),
    ... }, batch_size=[10, 11])
    >>> storage = LazyTensorStorage(100)
    >>> storage.set(range(10), data)
    >>> len(storage)  # only the first dimension is considered as indexable
    10
    >>> storage.get(0)
    TensorDict(
        fields={
            some data: Tensor(shape=torch.Size([11]), device=cpu, dtype=torch.float32, is_shared=False),
            some: TensorDict(
                fields={
                    nested: TensorDict(
                        fields={
                            data: Tensor(shape=torch.Size([11, 12]), device=cpu, dtype=torch.float32, is_shared=False)},
                        batch_size=torch.Size([11]),
                        device=cpu,
                        is_shared=False)},
                batch_size=torch.Size([11]),
                device=cpu,
                is_shared=False)},
        batch_size=torch.Size([11]),
        device=cpu,
        is_shared=False)
    >>> storage.set(0, storage.get(0).zero_()) # zeros the data along index ``0``

This class also supports tensorclass data.

Examples:
    >>> from tensordict import tensorclass
    >>> @tensorclass
    ... class MyClass:
    ...     foo: torch.Tensor
    ...     bar: torch.Tensor
    >>> data = MyClass(foo=torch.randn(10, 11), bar=torch.randn(10, 11, 12), batch_size=[10, 11])
    >>> storage = LazyTensorStorage(10)
    >>> storage.set(range(10), data)
    >>> storage.get(0)
    MyClass(
        bar=Tensor(shape=torch.Size([11, 12]), device=cpu, dtype=torch.float32, is_shared=False),
        foo=Tensor(shape=torch.Size([11]), device=cpu, dtype=torch.float32, is_shared=False),
        batch_size=torch.Size([11]),
        device=cpu,
        is_shared=False)""",
    # torchrl/data/replay_buffers/storages.py, line 1769
    "LazyMemmapStorage": r"""A memory-mapped storage for tensors and tensordicts.

Args:
    max_size (int): size of the storage, i.e. maximum number of elements stored
        in the buffer.

Keyword Args:
    scratch_dir (str or path): directory where memmap-tensors will be written.
        If ``shared_init=True`` and no ``scratch_dir`` is provided, a shared
        temporary directory will be created automatically.
    device (torch.device, optional): device where the sampled tensors will be
        stored and sent. Default is :obj:`torch.device("cpu")`.
        If ``None`` is provided, the device is automatically gathered from the
        first batch of data passed. This is not enabled by default to avoid
        data placed on GPU by mistake, causing OOM issues.
    ndim (int, optional): the number of dimensions to be accounted for when
        measuring the storage size. For instance, a storage of shape ``[3, 4]``
        has capacity ``3`` if ``ndim=1`` and ``12`` if ``ndim=2``.
        Defaults to ``1``.

        .. important:: When using a collector with ``trajs_per_batch``,
            keep the default ``ndim=1``.  ``trajs_per_batch`` writes
            variable-length trajectories as flat 1-D sequences, which is
            incompatible with a storage that expects a fixed second
            dimension (``ndim >= 2``).

    existsok (bool, optional): whether an error should be raised if any of the
        tensors already exists on disk. Defaults to ``True``. If ``False``, the
        tensor will be opened as is, not overewritten.
    shared_init (bool, optional): if ``True``, enables multiprocess coordination
        during storage initialization. First process initializes the memmap,
        others wait and load from the shared directory. Defaults to ``False``.
    auto_cleanup (bool, optional): if ``True``, automatically registers this
        storage for cleanup when the process exits (normally or via Ctrl+C/SIGTERM).
        This removes the memmap files from disk when no longer needed.
        Defaults to ``True`` when ``scratch_dir`` is ``None`` (using temp directory),
        and ``False`` when a custom ``scratch_dir`` is provided (preserving user data).

.. note:: When checkpointing a ``LazyMemmapStorage``, one can provide a path identical to where the storage is
    already stored to avoid executing long copies of data that is already stored on disk.
    This will only work if the default :class:`~torchrl.data.TensorStorageCheckpointer` checkpointer is used.

    Example::

        >>> from tensordict import TensorDict
        >>> from torchrl.data import TensorStorage, LazyMemmapStorage, ReplayBuffer
        >>> import tempfile
        >>> from pathlib import Path
        >>> import time
        >>> td = TensorDict(a=0, b=1).expand(1000).clone()
        >>> # We pass a path that is <main_ckpt_dir>/storage to LazyMemmapStorage
        >>> rb_memmap = ReplayBuffer(storage=LazyMemmapStorage(10_000_000, scratch_dir="dump/storage"))
        >>> rb_memmap.extend(td);
        >>> # Checkpointing in `dump` is a zero-copy, as the data is already in `dump/storage`
        >>> rb_memmap.dumps(Path("./dump"))


Examples:
    >>> data = TensorDict({
    ...     "some data": torch.randn(10, 11),
    ...     ("some", "nested", "data"): torch.randn(10, 11, 12),
    ... }, batch_size=[10, 11])
    >>> storage = LazyMemmapStorage(100)
    >>> storage.set(range(10), data)
    >>> len(storage)  # only the first dimension is considered as indexable
    10
    >>> storage.get(0)
    TensorDict(
        fields={
            some data: MemoryMappedTensor(shape=torch.Size([11]), device=cpu, dtype=torch.float32, is_shared=False),
            some: TensorDict(
                fields={
                    nested: TensorDict(
                        fields={
                            data: MemoryMappedTensor(shape=torch.Size([11, 12]), device=cpu, dtype=torch.float32, is_shared=False)},
                        batch_size=torch.Size([11]),
                        device=cpu,
                        is_shared=False)},
                batch_size=torch.Size([11]),
                device=cpu,
                is_shared=False)},
        batch_size=torch.Size([11]),
        device=cpu,
        is_shared=False)

This class also supports tensorclass data.

Examples:
    >>> from tensordict import tensorclass
    >>> @tensorclass
    ... class MyClass:
    ...     foo: torch.Tensor
    ...     bar: torch.Tensor
    >>> data = MyClass(foo=torch.randn(10, 11), bar=torch.randn(10, 11, 12), batch_size=[10, 11])
    >>> storage = LazyMemmapStorage(10)
    >>> storage.set(range(10), data)
    >>> storage.get(0)
    MyClass(
        bar=MemoryMappedTensor(shape=torch.Size([11, 12]), device=cpu, dtype=torch.float32, is_shared=False),
        foo=MemoryMappedTensor(shape=torch.Size([11]), device=cpu, dtype=torch.float32, is_shared=False),
        batch_size=torch.Size([11]),
        device=cpu,
        is_shared=False)""",
    # torchrl/data/replay_buffers/storages.py, line 2062
    "LazyMemmapStorage.cleanup": r"""Clean up memmap files from disk.

This method removes the memmap directory and all its contents from disk.
It is automatically called on process exit if ``auto_cleanup=True``.

Returns:
    bool: ``True`` if cleanup was performed, ``False`` if already cleaned up
        or no cleanup needed.

Note:
    After cleanup, the storage is no longer usable. Any attempt to access
    the storage will result in undefined behavior.

Example:
    >>> storage = LazyMemmapStorage(1000, auto_cleanup=True)
    >>> # ... use storage ...
    >>> storage.cleanup()  # Manually clean up when done""",
}

# The docstrings of TorchRL's samplers that mixreplay exports under their names, verbatim,
# for their examples to run against mixreplay (test_sampler_docstrings.py). Origin:
#   repository  https://github.com/pytorch/rl
#   path        torchrl/data/replay_buffers/samplers.py
#   commit      373c31a85b30be19e5e1db5c466f25d15522ac98 (branch prepare-0.14, "Bump 0.14.0");
#               last changed in 416941983
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
"""TorchRL docstrings (text, not code: their examples run in test_sampler_docstrings.py)."""

DOCSTRINGS = {
    # torchrl/data/replay_buffers/samplers.py, line 181
    "RandomSampler": r"""A uniformly random sampler for composable replay buffers.

Keyword Args:
    replacement (bool, optional): if ``False``, the call is dispatched to
        :class:`SamplerWithoutReplacement`, and any additional keyword
        arguments (e.g. ``drop_last``, ``shuffle``) are forwarded to its
        constructor. Defaults to ``True``.

Examples:
    >>> from torchrl.data import RandomSampler, SamplerWithoutReplacement
    >>> isinstance(RandomSampler(), RandomSampler)
    True
    >>> isinstance(RandomSampler(replacement=False), SamplerWithoutReplacement)
    True
    >>> isinstance(
    ...     RandomSampler(replacement=False, drop_last=True),
    ...     SamplerWithoutReplacement,
    ... )
    True""",
    # torchrl/data/replay_buffers/samplers.py, line 580
    "SamplerWithoutReplacement": r"""A data-consuming sampler that ensures that the same sample is not present in consecutive batches.

Args:
    drop_last (bool, optional): if ``True``, the last incomplete sample (if any) will be dropped.
        If ``False``, this last sample will be kept and (unlike with torch dataloaders)
        completed with other samples from a fresh indices permutation.
        Defaults to ``False``.
    shuffle (bool, optional): if ``False``, the items are not randomly
        permuted. This enables to iterate over the replay buffer in the
        order the data was collected. Defaults to ``True``.

*Caution*: If the size of the storage changes in between two calls, the samples will be re-shuffled
(as we can't generally keep track of which samples have been sampled before and which haven't).

Similarly, it is expected that the storage content remains the same in between two calls,
but this is not enforced.

When the sampler reaches the end of the list of available indices, a new sample order
will be generated and the resulting indices will be completed with this new draw, which
can lead to duplicated indices, unless the :obj:`drop_last` argument is set to ``True``.""",
    # torchrl/data/replay_buffers/samplers.py, line 942
    "PrioritizedSampler": r"""Prioritized sampler for replay buffer.

This sampler implements Prioritized Experience Replay (PER) as presented in
"Schaul, T.; Quan, J.; Antonoglou, I.; and Silver, D. 2015. Prioritized experience replay."
(https://arxiv.org/abs/1511.05952)

**Core Idea**: Instead of sampling experiences uniformly from the replay buffer,
PER samples experiences with probability proportional to their "importance" - typically
measured by the magnitude of their temporal-difference (TD) error. This prioritization
can lead to faster learning by focusing on experiences that are most informative.

**How it works**:
1. Each experience is assigned a priority based on its TD error: :math:`p_i = |\delta_i| + \epsilon`
2. Sampling probability is computed as: :math:`P(i) = \frac{p_i^\alpha}{\sum_j p_j^\alpha}`
3. Importance sampling weights correct for the bias: :math:`w_i = (N \cdot P(i))^{-\beta}`

Args:
    max_capacity (int): maximum capacity of the buffer.
    alpha (:obj:`float`): exponent :math:`\alpha` determines how much prioritization is used.
        - :math:`\alpha = 0`: uniform sampling (no prioritization)
        - :math:`\alpha = 1`: full prioritization based on TD error magnitude
        - Typical values: 0.4-0.7 for balanced prioritization
        - Higher :math:`\alpha` means more aggressive prioritization of high-error experiences
    beta (:obj:`float`): importance sampling negative exponent :math:`\beta`.
        - :math:`\beta` controls the correction for the bias introduced by prioritization
        - :math:`\beta = 0`: no correction (biased towards high-priority samples)
        - :math:`\beta = 1`: full correction (unbiased but potentially unstable)
        - Typical values: start at 0.4-0.6 and anneal to 1.0 during training
        - Lower :math:`\beta` early in training provides stability, higher :math:`\beta` later reduces bias
    eps (:obj:`float`, optional): small constant added to priorities to ensure
        no experience has zero priority. This prevents experiences from never
        being sampled. Defaults to 1e-8.
    reduction (str, optional): the reduction method for multidimensional
        tensordicts (ie stored trajectory). Can be one of "max", "min",
        "median" or "mean".
    max_priority_within_buffer (bool, optional): if ``True``, the max-priority
        is tracked within the buffer. When ``False``, the max-priority tracks
        the maximum value since the instantiation of the sampler.
    device (torch.device or str, optional): device that holds the priority
        trees. Defaults to ``None``, in which case CUDA storage selects a CUDA
        tree when the installed TorchRL extension was built with CUDA support,
        and CPU storage keeps the existing CPU tree.

**Parameter Guidelines**:

- **:math:`\alpha` (alpha)**: Controls how much to prioritize high-error experiences.
  0.4-0.7: Good balance between learning speed and stability.
  1.0: Maximum prioritization (may be unstable).
  0.0: Uniform sampling (no prioritization benefit).

- **:math:`\beta` (beta)**: Controls importance sampling correction.
  Start at 0.4-0.6 for training stability.
  Anneal to 1.0 over training to reduce bias.
  Lower values = more stable but biased.
  Higher values = less biased but potentially unstable.

- **:math:`\epsilon`**: Small constant to prevent zero priorities.
  1e-8: Good default value.
  Too small: may cause numerical issues.
  Too large: reduces prioritization effect.

Examples:
    >>> from torchrl.data.replay_buffers import ReplayBuffer, LazyTensorStorage, PrioritizedSampler
    >>> from tensordict import TensorDict
    >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=PrioritizedSampler(max_capacity=10, alpha=1.0, beta=1.0))
    >>> priority = torch.tensor([0, 1000])
    >>> data_0 = TensorDict({"reward": 0, "obs": [0], "action": [0], "priority": priority[0]}, [])
    >>> data_1 = TensorDict({"reward": 1, "obs": [1], "action": [2], "priority": priority[1]}, [])
    >>> rb.add(data_0)
    >>> rb.add(data_1)
    >>> rb.update_priority(torch.tensor([0, 1]), priority=priority)
    >>> sample, info = rb.sample(10, return_info=True)
    >>> print(sample)
    TensorDict(
            fields={
                action: Tensor(shape=torch.Size([10, 1]), device=cpu, dtype=torch.int64, is_shared=False),
                obs: Tensor(shape=torch.Size([10, 1]), device=cpu, dtype=torch.int64, is_shared=False),
                priority: Tensor(shape=torch.Size([10]), device=cpu, dtype=torch.int64, is_shared=False),
                reward: Tensor(shape=torch.Size([10]), device=cpu, dtype=torch.int64, is_shared=False)},
            batch_size=torch.Size([10]),
            device=cpu,
            is_shared=False)
    >>> print(info)
    {'priority_weight': array([1.e-11, 1.e-11, 1.e-11, 1.e-11, 1.e-11, 1.e-11, 1.e-11, 1.e-11,
           1.e-11, 1.e-11], dtype=float32), 'index': array([1, 1, 1, 1, 1, 1, 1, 1, 1, 1])}

.. note:: Using a :class:`~torchrl.data.replay_buffers.TensorDictReplayBuffer` can smoothen the
    process of updating the priorities:

        >>> from torchrl.data.replay_buffers import TensorDictReplayBuffer as TDRB, LazyTensorStorage, PrioritizedSampler
        >>> from tensordict import TensorDict
        >>> rb = TDRB(
        ...     storage=LazyTensorStorage(10),
        ...     sampler=PrioritizedSampler(max_capacity=10, alpha=1.0, beta=1.0),
        ...     priority_key="priority",  # This kwarg isn't present in regular RBs
        ... )
        >>> priority = torch.tensor([0, 1000])
        >>> data_0 = TensorDict({"reward": 0, "obs": [0], "action": [0], "priority": priority[0]}, [])
        >>> data_1 = TensorDict({"reward": 1, "obs": [1], "action": [2], "priority": priority[1]}, [])
        >>> data = torch.stack([data_0, data_1])
        >>> rb.extend(data)
        >>> rb.update_priority(data)  # Reads the "priority" key as indicated in the constructor
        >>> sample, info = rb.sample(10, return_info=True)
        >>> print(sample['index'])  # The index is packed with the tensordict
        tensor([1, 1, 1, 1, 1, 1, 1, 1, 1, 1])""",
    # torchrl/data/replay_buffers/samplers.py, line 1696
    "SliceSampler": r"""Samples slices of data along the first dimension, given start and stop signals.

This class samples sub-trajectories with replacement. For a version without
replacement, see :class:`~torchrl.data.replay_buffers.samplers.SliceSamplerWithoutReplacement`.
Equivalently, ``SliceSampler(replacement=False, ...)`` dispatches to
:class:`SliceSamplerWithoutReplacement` and forwards the remaining keyword
arguments (including ``drop_last`` and ``shuffle``).

.. note:: `SliceSampler` can be slow to retrieve the trajectory indices. To accelerate
    its execution, prefer using `end_key` over `traj_key`, and consider the following
    keyword arguments: :attr:`compile`, :attr:`cache_values` and :attr:`use_gpu`.

Keyword Args:
    replacement (bool, optional): if ``False``, the call is dispatched to
        :class:`SliceSamplerWithoutReplacement` (which accepts the same
        keyword arguments as well as ``drop_last`` and ``shuffle``).
        Defaults to ``True``.
    num_slices (int): the number of slices to be sampled. The batch-size
        must be greater or equal to the ``num_slices`` argument. Exclusive
        with ``slice_len``.
    slice_len (int): the length of the slices to be sampled. The batch-size
        must be greater or equal to the ``slice_len`` argument and divisible
        by it. Exclusive with ``num_slices``.
    end_key (NestedKey, optional): the key indicating the end of a
        trajectory (or episode). Defaults to ``("next", "done")``.
        Exclusive with ``end_keys``.

        .. note:: A single ``end_key`` misses trajectories whose end is
            marked by another flag only (e.g. datasets carrying
            ``truncated=True`` ends without an aggregate ``done`` entry
            -- those get silently merged with the next trajectory). Pass
            ``end_keys`` to apply the
            :data:`~torchrl.data.DEFAULT_DONE_KEYS` union convention.
    end_keys (sequence of NestedKey, optional): a sequence of keys whose
        entries are OR-ed together to build the end-of-trajectory signal.
        Keys absent from the storage are skipped (at least one must be
        present). Use
        ``[("next", key) for key in DEFAULT_DONE_KEYS]`` to union
        ``done``, ``truncated`` and ``terminated``. Exclusive with
        ``end_key``. Defaults to ``None`` (use ``end_key``).
    traj_key (NestedKey, optional): the key indicating the trajectories.
        Defaults to ``"episode"`` (commonly used across datasets in TorchRL).
    ends (torch.Tensor, optional): a 1d boolean tensor containing the end of run signals.
        To be used whenever the ``end_key`` or ``traj_key`` is expensive to get,
        or when this signal is readily available. Must be used with ``cache_values=True``
        and cannot be used in conjunction with ``end_key`` or ``traj_key``.
        If provided, it is assumed that the storage is at capacity and that
        if the last element of the ``ends`` tensor is ``False``,
        the same trajectory spans across end and beginning.
    trajectories (torch.Tensor, optional): a 1d integer tensor containing the run ids.
        To be used whenever the ``end_key`` or ``traj_key`` is expensive to get,
        or when this signal is readily available. Must be used with ``cache_values=True``
        and cannot be used in conjunction with ``end_key`` or ``traj_key``.
        If provided, it is assumed that the storage is at capacity and that
        if the last element of the trajectory tensor is identical to the first,
        the same trajectory spans across end and beginning.
    cache_values (bool, optional): to be used with static datasets.
        Caches trajectory boundaries until the storage revision changes,
        including writes from another buffer or process. Direct backing
        tensor mutations cannot be detected.

    truncated_key (NestedKey, optional): If not ``None``, this argument
        indicates where a truncated signal should be written in the output
        data. This is used to indicate to value estimators where the provided
        trajectory breaks. Defaults to ``("next", "truncated")``.
        This feature only works with :class:`~torchrl.data.replay_buffers.TensorDictReplayBuffer`
        instances (otherwise the truncated key is returned in the info dictionary
        returned by the :meth:`~torchrl.data.replay_buffers.ReplayBuffer.sample` method).
    strict_length (bool, optional): if ``False``, trajectories of length
        shorter than `slice_len` (or `batch_size // num_slices`) will be
        allowed to appear in the batch. If ``True``, trajectories shorted
        than required will be filtered out.
        Be mindful that this can result in effective `batch_size`  shorter
        than the one asked for! Trajectories can be split using
        :func:`~torchrl.collectors.split_trajectories`. Defaults to ``True``.
    pad_output (bool, optional): **discouraged. Prefer the default
        (``False``).** When ``True`` (and ``strict_length=False``),
        short trajectories are padded by *duplicating their last real
        timestep* up to ``slice_len`` so the output's ``B * T`` is a
        fixed product. The output is still a 1D batch of shape
        ``[B * T]`` — the sample is not reshaped to ``[B, T]``. A 1D
        boolean mask of shape ``[B * T]`` is written to
        ``("collector", "mask")`` flagging real (``True``) vs
        duplicated-last-step (``False``) positions. TorchRL's primitives
        (recurrent modules under
        :func:`~torchrl.modules.set_recurrent_mode`, mask-aware loss
        modules, ``split_trajectories``, etc.) are all designed to
        consume concatenated variable-length slices directly via the
        ``is_init`` / ``truncated`` markers the sampler already emits,
        so padding is a niche escape hatch for downstream code that
        genuinely cannot accept a ragged batch (e.g. a custom op that
        requires a fixed time dimension before a manual reshape).
        Combining ``pad_output=True`` with ``strict_length=True`` raises
        :class:`ValueError`. Defaults to ``False``.
    compile (bool or dict of kwargs, optional): if ``True``, the bottleneck of
        the :meth:`~sample` method will be compiled with :func:`~torch.compile`.
        Keyword arguments can also be passed to torch.compile with this arg.
        Defaults to ``False``.
    span (bool, int, Tuple[bool | int, bool | int], optional): if provided, the sampled
        trajectory will span across the left and/or the right. This means that possibly
        fewer elements will be provided than what was required. A boolean value means
        that at least one element will be sampled per trajectory. An integer `i` means
        that at least `slice_len - i` samples will be gathered for each sampled trajectory.
        Using tuples allows a fine grained control over the span on the left (beginning
        of the stored trajectory) and on the right (end of the stored trajectory).
    use_gpu (bool or torch.device): if ``True`` (or is a device is passed), an accelerator
        will be used to retrieve the indices of the trajectory starts. This can significantly
        accelerate the sampling when the buffer content is large.
        Defaults to ``False``.

.. note:: To recover the trajectory splits in the storage,
    :class:`~torchrl.data.replay_buffers.samplers.SliceSampler` will first
    attempt to find the ``traj_key`` entry in the storage. If it cannot be
    found, the ``end_key`` will be used to reconstruct the episodes.

.. note:: When using a multi-process collector
    (:class:`~torchrl.collectors.MultiSyncCollector` or
    :class:`~torchrl.collectors.MultiAsyncCollector`) with a shared replay
    buffer, adjacent transitions in the buffer may come from different
    workers and different episodes. A ``SliceSampler`` that relies on
    ``end_key`` can then sample slices that straddle unrelated trajectories.

    To avoid this, either:

    - set ``trajs_per_batch`` on the collector so that only **complete**
      trajectories (each ending with ``done=True``) are written to the
      buffer (use ``ndim=1`` on the storage — ``ndim >= 2`` is
      incompatible with the variable-length flat sequences that
      ``trajs_per_batch`` produces), or
    - set ``set_truncated=True`` on the collector so that every batch
      boundary carries a ``done`` signal (note: this introduces artificial
      truncations that value estimators must account for).

.. note:: When using `strict_length=False`, it is recommended to use
    :func:`~torchrl.collectors.utils.split_trajectories` to split the sampled trajectories.
    However, if two samples from the same episode are placed next to each other,
    this may produce incorrect results. To avoid this issue, consider one of these solutions:

    - using a :class:`~torchrl.data.TensorDictReplayBuffer` instance with the slice sampler

        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.collectors.utils import split_trajectories
        >>> from torchrl.data import TensorDictReplayBuffer, ReplayBuffer, LazyTensorStorage, SliceSampler, SliceSamplerWithoutReplacement
        >>>
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(max_size=1000),
        ...                   sampler=SliceSampler(
        ...                       slice_len=5, traj_key="episode",strict_length=False,
        ...                   ))
        ...
        >>> ep_1 = TensorDict(
        ...     {"obs": torch.arange(100),
        ...     "episode": torch.zeros(100),},
        ...     batch_size=[100]
        ... )
        >>> ep_2 = TensorDict(
        ...     {"obs": torch.arange(4),
        ...     "episode": torch.ones(4),},
        ...     batch_size=[4]
        ... )
        >>> rb.extend(ep_1)
        >>> rb.extend(ep_2)
        >>>
        >>> s = rb.sample(50)
        >>> print(s)
        TensorDict(
            fields={
                episode: Tensor(shape=torch.Size([46]), device=cpu, dtype=torch.float32, is_shared=False),
                index: Tensor(shape=torch.Size([46, 1]), device=cpu, dtype=torch.int64, is_shared=False),
                next: TensorDict(
                    fields={
                        done: Tensor(shape=torch.Size([46, 1]), device=cpu, dtype=torch.bool, is_shared=False),
                        terminated: Tensor(shape=torch.Size([46, 1]), device=cpu, dtype=torch.bool, is_shared=False),
                        truncated: Tensor(shape=torch.Size([46, 1]), device=cpu, dtype=torch.bool, is_shared=False)},
                    batch_size=torch.Size([46]),
                    device=cpu,
                    is_shared=False),
                obs: Tensor(shape=torch.Size([46]), device=cpu, dtype=torch.int64, is_shared=False)},
            batch_size=torch.Size([46]),
            device=cpu,
            is_shared=False)
        >>> t = split_trajectories(s, done_key="truncated")
        >>> print(t["obs"])
        tensor([[73, 74, 75, 76, 77],
                [ 0,  1,  2,  3,  0],
                [ 0,  1,  2,  3,  0],
                [41, 42, 43, 44, 45],
                [ 0,  1,  2,  3,  0],
                [67, 68, 69, 70, 71],
                [27, 28, 29, 30, 31],
                [80, 81, 82, 83, 84],
                [17, 18, 19, 20, 21],
                [ 0,  1,  2,  3,  0]])
        >>> print(t["episode"])
        tensor([[0., 0., 0., 0., 0.],
                [1., 1., 1., 1., 0.],
                [1., 1., 1., 1., 0.],
                [0., 0., 0., 0., 0.],
                [1., 1., 1., 1., 0.],
                [0., 0., 0., 0., 0.],
                [0., 0., 0., 0., 0.],
                [0., 0., 0., 0., 0.],
                [0., 0., 0., 0., 0.],
                [1., 1., 1., 1., 0.]])

    - using a :class:`~torchrl.data.replay_buffers.samplers.SliceSamplerWithoutReplacement`

        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.collectors.utils import split_trajectories
        >>> from torchrl.data import ReplayBuffer, LazyTensorStorage, SliceSampler, SliceSamplerWithoutReplacement
        >>>
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(max_size=1000),
        ...                   sampler=SliceSamplerWithoutReplacement(
        ...                       slice_len=5, traj_key="episode",strict_length=False
        ...                   ))
        ...
        >>> ep_1 = TensorDict(
        ...     {"obs": torch.arange(100),
        ...     "episode": torch.zeros(100),},
        ...     batch_size=[100]
        ... )
        >>> ep_2 = TensorDict(
        ...     {"obs": torch.arange(4),
        ...     "episode": torch.ones(4),},
        ...     batch_size=[4]
        ... )
        >>> rb.extend(ep_1)
        >>> rb.extend(ep_2)
        >>>
        >>> s = rb.sample(50)
        >>> t = split_trajectories(s, trajectory_key="episode")
        >>> print(t["obs"])
        tensor([[75, 76, 77, 78, 79],
                [ 0,  1,  2,  3,  0]])
        >>> print(t["episode"])
        tensor([[0., 0., 0., 0., 0.],
                [1., 1., 1., 1., 0.]])

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from torchrl.data.replay_buffers import LazyMemmapStorage, TensorDictReplayBuffer
    >>> from torchrl.data.replay_buffers.samplers import SliceSampler
    >>> torch.manual_seed(0)
    >>> rb = TensorDictReplayBuffer(
    ...     storage=LazyMemmapStorage(1_000_000),
    ...     sampler=SliceSampler(cache_values=True, num_slices=10),
    ...     batch_size=320,
    ... )
    >>> episode = torch.zeros(1000, dtype=torch.int)
    >>> episode[:300] = 1
    >>> episode[300:550] = 2
    >>> episode[550:700] = 3
    >>> episode[700:] = 4
    >>> data = TensorDict(
    ...     {
    ...         "episode": episode,
    ...         "obs": torch.randn((3, 4, 5)).expand(1000, 3, 4, 5),
    ...         "act": torch.randn((20,)).expand(1000, 20),
    ...         "other": torch.randn((20, 50)).expand(1000, 20, 50),
    ...     }, [1000]
    ... )
    >>> rb.extend(data)
    >>> sample = rb.sample()
    >>> print("sample:", sample)
    >>> print("episodes", sample.get("episode").unique())
    episodes tensor([1, 2, 3, 4], dtype=torch.int32)

:class:`~torchrl.data.replay_buffers.SliceSampler` is default-compatible with
most of TorchRL's datasets:

Examples:
    >>> import torch
    >>>
    >>> from torchrl.data.datasets import RobosetExperienceReplay
    >>> from torchrl.data import SliceSampler
    >>>
    >>> torch.manual_seed(0)
    >>> num_slices = 10
    >>> dataid = list(RobosetExperienceReplay.available_datasets)[0]
    >>> data = RobosetExperienceReplay(dataid, batch_size=320, sampler=SliceSampler(num_slices=num_slices))
    >>> for batch in data:
    ...     batch = batch.reshape(num_slices, -1)
    ...     break
    >>> print("check that each batch only has one episode:", batch["episode"].unique(dim=1))
    check that each batch only has one episode: tensor([[19],
            [14],
            [ 8],
            [10],
            [13],
            [ 4],
            [ 2],
            [ 3],
            [22],
            [ 8]])

.. seealso::

    Trajectory boundaries are recovered at sampling time with
    :func:`~torchrl.data.find_start_stop_traj`, which documents how
    trajectory ids, end flags, the write cursor and the storage capacity
    interact. See also :ref:`the trajectory-boundary documentation
    <ref_traj_boundaries>` for the conventions collectors, storages and
    samplers follow.""",
}

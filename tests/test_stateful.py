"""Fuzzing: extend / sample / anneal / set_step / update_priority / dumps+loads, interleaved at
random, against a reference model (a Python list of the rows written, with ring semantics).

After every step: the lengths and the ring's content equal the model's; every sampled row is a
row the model holds, in the slot it says; the offline count is ``round(f * B)``. After a
``dumps`` + ``loads`` into a fresh buffer, that buffer and its twin (the original, which never
loaded anything) receive the same calls and must return the same batches from then on.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mixreplay import OfflineDataset, OfflineToOnlineReplayBuffer
from mixreplay.samplers import PrioritizedSampler
from mixreplay.schedules import Linear, Proportional
from tests.helpers import OFFLINE_BASE, assert_same, id_rows

OFFLINE_ROWS = 40
OFFLINE = OfflineDataset.from_tensordict(id_rows(OFFLINE_BASE, OFFLINE_ROWS))
VARIANTS = ["float", "linear", "proportional"]


class MixingMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="mixreplay-fuzz-"))
        self.twin = None
        self.info = None

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def make(self):
        if self.variant == "float":
            fraction = self.base
        elif self.variant == "linear":
            fraction = Linear(self.base, 0.0, 12)
        else:
            fraction = Proportional("offline")
        sampler = PrioritizedSampler(alpha=0.8) if self.prioritized else None
        return OfflineToOnlineReplayBuffer(
            OFFLINE,
            online_capacity=self.capacity,
            offline_fraction=fraction,
            generator=self.seed,
            online_sampler=sampler,
        )

    @initialize(
        variant=st.sampled_from(VARIANTS),
        prioritized=st.booleans(),
        capacity=st.integers(1, 9),
        base=st.floats(0.05, 0.95),
        seed=st.integers(0, 2**16),
    )
    def start(self, variant, prioritized, capacity, base, seed):
        self.variant, self.prioritized, self.capacity, self.base, self.seed = (
            variant,
            prioritized,
            capacity,
            base,
            seed,
        )
        self.rb = self.make()
        self.ring: list[int | None] = [None] * capacity  # the model: id held by each slot
        self.written = 0
        self.step = 0
        # anneal(step, total) installs base * max(0, 1 - step / total) as the schedule
        self.anneal_total: int | None = None

    # -- the model ---------------------------------------------------------------------------

    def online_len(self) -> int:
        return min(self.written, self.capacity)

    def base_fraction(self) -> float:
        """The constructor's fraction; a schedule's at step 0 (Proportional: all offline then)."""
        return 1.0 if self.variant == "proportional" else self.base

    def fraction(self) -> float:
        if self.anneal_total is not None:
            return self.base_fraction() * max(0.0, 1.0 - self.step / self.anneal_total)
        if self.variant == "proportional":
            return OFFLINE_ROWS / (OFFLINE_ROWS + self.online_len())
        if self.variant == "linear":
            return Linear(self.base, 0.0, 12)(self.step)
        return self.base

    def buffers(self):
        return [self.rb] if self.twin is None else [self.rb, self.twin]

    # -- rules -------------------------------------------------------------------------------

    @rule(n=st.integers(1, 12))
    def extend(self, n):
        for rb in self.buffers():
            slots = rb.extend(id_rows(self.written, n))
        assert slots.tolist() == [(self.written + i) % self.capacity for i in range(n)]
        for i in range(n):
            self.ring[(self.written + i) % self.capacity] = self.written + i
        self.written += n

    @rule(batch_size=st.integers(1, 20))
    def sample(self, batch_size):
        outs = [rb.sample(batch_size, return_info=True) for rb in self.buffers()]
        if self.twin is not None:
            assert_same(outs[0], outs[1])
        batch, info = outs[0]
        ids = batch["next", "reward"].squeeze(-1).long()
        source, index = info["source"], info["index"]
        n_off = batch_size if self.online_len() == 0 else round(self.fraction() * batch_size)
        assert int((source == 0).sum()) == n_off
        assert bool((source[:n_off] == 0).all())  # offline rows first
        assert torch.equal(ids[:n_off], index[:n_off] + OFFLINE_BASE)
        assert bool((index[:n_off] < OFFLINE_ROWS).all())
        for slot, row in zip(index[n_off:].tolist(), ids[n_off:].tolist()):
            assert slot < self.online_len() and self.ring[slot] == row
        self.info = info

    @rule(step=st.integers(0, 30), total=st.integers(1, 30))
    def anneal(self, step, total):
        for rb in self.buffers():
            rb.anneal(step, total)
        self.anneal_total, self.step = total, step

    @rule(step=st.integers(0, 30))
    def set_step(self, step):
        for rb in self.buffers():
            rb.set_step(step)
        self.step = step  # along the current schedule: an anneal stays installed

    @precondition(lambda self: self.prioritized and self.info is not None)
    @rule(data=st.data())
    def update_priority(self, data):
        n = self.info.batch_size[0]
        priority = torch.tensor(data.draw(st.lists(st.floats(0, 100), min_size=n, max_size=n)))
        for rb in self.buffers():
            rb.update_priority(self.info, priority)
        self.info = None  # a later write may have reused the slots

    @rule()
    def dumps_and_loads(self):
        path = self.dir / "ck"
        self.rb.dumps(path)
        fresh = self.make()
        fresh.loads(path)
        if self.twin is None:
            self.twin = self.rb  # the buffer that never loaded a checkpoint
        self.rb = fresh

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def lengths_and_ring_match_the_model(self):
        for rb in self.buffers():
            assert len(rb) == OFFLINE_ROWS + self.online_len()
            storage = rb.online_buffer.storage
            assert storage.write_count == self.written
            assert storage.cursor == self.written % self.capacity
            if self.written:
                held = storage.column(("next", "reward")).squeeze(-1).long().tolist()
                assert held == self.ring[: self.online_len()]
            assert rb.offline_fraction == pytest.approx(self.fraction(), abs=1e-12)


MixingMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=25, deadline=None)
TestMixingMachine = MixingMachine.TestCase

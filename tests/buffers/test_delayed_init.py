"""``delayed_init=True`` (TorchRL's): a buffer built on its first use, not when made."""

from __future__ import annotations

import pickle
import threading

import pytest

from mixreplay import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer
from tests.helpers import counted_rows as rows


class Calls:
    """Factories that count their calls (module level: they pickle)."""

    storages = 0
    transforms = 0


def make_storage() -> LazyTensorStorage:
    Calls.storages += 1
    return LazyTensorStorage(20)


def make_transform():
    Calls.transforms += 1
    return _double


def _double(td):
    return td.set("x", td["x"] * 2)


@pytest.fixture(autouse=True)
def _reset_calls():
    Calls.storages = Calls.transforms = 0


def deferred(**kwargs) -> ReplayBuffer:
    return ReplayBuffer(
        storage=make_storage,
        transform_factory=make_transform,
        batch_size=4,
        generator=0,
        delayed_init=True,
        **kwargs,
    )


def test_nothing_is_built_until_the_first_use():
    rb = deferred()
    assert not rb.initialized and (Calls.storages, Calls.transforms) == (0, 0)
    assert rb.stats()["initialized"] is False and not rb.initialized  # stats builds nothing
    rb.extend(rows(6))
    assert rb.initialized and (Calls.storages, Calls.transforms) == (1, 1)
    assert rb.stats()["initialized"] is True and rb.stats()["size"] == 6
    rb.sample()
    assert (Calls.storages, Calls.transforms) == (1, 1)  # built once
    assert (rb.sample()["x"] % 2 == 0).all()  # the factory's transform runs


def test_stats_of_an_unbuilt_buffer_name_its_storage():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), delayed_init=True)
    assert rb.stats() == {
        "size": 0,
        "write_count": 0,
        "prefetch_queue_size": 0,
        "initialized": False,
        "capacity": 10,
        "utilization": 0.0,
    }
    assert ReplayBuffer(delayed_init=True).stats()["capacity"] == 1000  # the default storage


def test_any_use_builds_it_reads_included():
    for use in (len, repr, lambda rb: rb.storage, lambda rb: rb.sampler, lambda rb: rb.write_count):
        rb = deferred()
        use(rb)
        assert rb.initialized


def test_a_pickled_unbuilt_buffer_is_built_where_it_is_used():
    rb = deferred()
    copy = pickle.loads(pickle.dumps(rb))
    assert not copy.initialized and Calls.storages == 0
    copy.extend(rows(5))
    assert copy.initialized and not rb.initialized and len(copy) == 5


def test_threads_using_it_first_build_it_once():
    rb = deferred()
    barrier = threading.Barrier(4, timeout=30)
    errors: list[BaseException] = []

    def use():
        try:
            barrier.wait()
            rb.extend(rows(2))
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors
    assert Calls.storages == 1 and len(rb) == 8


def test_subclasses_defer_too_and_bad_arguments_surface_at_the_first_use():
    rb = TensorDictReplayBuffer(priority_key="loss", batch_size=2, delayed_init=True)
    assert not rb.initialized and rb.priority_key == "loss"
    rb.extend(rows(3))
    assert rb.initialized and "index" in rb.sample().keys()
    bad = ReplayBuffer(prefetch=2, delayed_init=True)  # TorchRL's rule: checked when built
    for _ in range(2):  # a failed build leaves it unbuilt: the next use tries again
        with pytest.raises(ValueError, match="prefetch=2 needs batch_size= at construction"):
            bad.extend(rows(4))
        assert not bad.initialized and "_storage" not in vars(bad)  # nothing half-built
    with pytest.raises(TypeError, match="delayed_init must be"):
        ReplayBuffer(delayed_init=1)
    with pytest.raises(TypeError, match="does not support TorchRL's dim_extend"):
        ReplayBuffer(delayed_init=True, dim_extend=1)  # refused now, not at the first use
    assert ReplayBuffer(delayed_init=None).initialized  # TorchRL's default spelling

"""The data types a ReplayBuffer stores (mixreplay.data_types): given back as they were given.

Before issue 19 a buffer took TensorDicts ``[n]`` only; TorchRL's also takes tensors,
pytrees, tensorclasses, ``[n, ...]`` TensorDicts and lists of items.
"""

from __future__ import annotations

import collections
import os
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import LazyStackedTensorDict, TensorDict, tensorclass
from torch.utils._pytree import tree_flatten, tree_map

from mixreplay import (
    CheckpointError,
    LazyMemmapStorage,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    TensorStorage,
)
from mixreplay.errors import DataStructureError
from tests.helpers import Inner, Outer


@tensorclass
class Labelled:
    tensor: torch.Tensor
    text: str


def assert_same_tree(a, b) -> None:
    la, sa = tree_flatten(a)
    lb, sb = tree_flatten(b)
    assert sa == sb
    assert all(torch.equal(x, y) for x, y in zip(la, lb))


def pytree(n: int, offset: int = 0):
    i = torch.arange(offset, offset + n)
    return {"a": i, "b": {"c": [i[:, None].float().expand(n, 3), (i[:, None, None] * 2,)]}, 30: -i}


STORAGES = {
    "tensor": lambda tmp: LazyTensorStorage(8),
    "memmap": lambda tmp: LazyMemmapStorage(8, scratch_dir=tmp),
}


@pytest.fixture(params=sorted(STORAGES))
def make(request, tmp_path):
    return lambda: STORAGES[request.param](tmp_path)


def test_tensors_come_back_as_tensors(make):
    rb = ReplayBuffer(storage=make(), batch_size=4, generator=0)
    assert rb.extend(torch.arange(5)).tolist() == [0, 1, 2, 3, 4]
    batch = rb.sample()
    assert isinstance(batch, torch.Tensor) and batch.shape == (4,)
    assert set(batch.tolist()) <= set(range(5))
    assert torch.equal(rb[:], torch.arange(5))
    assert rb[2] == 2 and isinstance(rb[2], torch.Tensor)
    assert torch.equal(rb.storage.get(range(3)), torch.arange(3))


def test_pytrees_come_back_with_their_structure(make):
    rb = ReplayBuffer(storage=make(), generator=0)
    data = pytree(5)
    rb.extend(data)
    assert_same_tree(rb[:], data)
    assert_same_tree(rb[1], tree_map(lambda x: x[1], data))
    batch, info = rb.sample(6, return_info=True)
    assert_same_tree(batch, tree_map(lambda x: x[info["index"]], data))


def test_nested_tensorclasses_come_back_as_their_classes(make):
    rb = ReplayBuffer(storage=make(), batch_size=3, generator=0)
    data = Outer(
        key1=torch.arange(6.0).view(3, 2),
        next=Inner(key1=torch.ones(3, 4), batch_size=[3]),
        batch_size=[3],
    )
    rb.extend(data)
    batch = rb.sample()
    assert type(batch) is Outer and type(batch.next) is Inner
    assert batch.batch_size == (3,) and batch.next.key1.shape == (3, 4)
    row = rb[1]
    assert type(row) is Outer and torch.equal(row.key1, torch.tensor([2.0, 3.0]))


def test_tensordicts_with_more_batch_dims_are_rows_of_tensordicts(make):
    rb = ReplayBuffer(storage=make(), generator=0)
    td = TensorDict({"a": torch.arange(15).view(5, 3), ("n", "b"): torch.zeros(5, 3, 2)}, [5, 3])
    rb.extend(td)
    assert len(rb) == 5
    batch = rb.sample(4)
    assert batch.batch_size == (4, 3) and batch["n"].batch_size == (4, 3)
    assert rb[2].batch_size == (3,) and rb[2]["a"].tolist() == [6, 7, 8]


def test_lists_are_items_stacked_and_tuples_are_pytrees(make):
    rb = ReplayBuffer(storage=make(), generator=0)
    rb.extend([torch.full((2,), i) for i in range(4)])  # 4 items, one row each
    assert len(rb) == 4 and torch.equal(rb[3], torch.full((2,), 3))
    rb2 = ReplayBuffer(storage=make())
    rb2.extend((torch.arange(3), torch.zeros(3, 2)))  # one pytree of 3 rows
    assert len(rb2) == 3 and isinstance(rb2[:], tuple)
    rb3 = ReplayBuffer(storage=make())
    rb3.extend([TensorDict({"a": torch.randn(2, 3)}, [2])])  # a list of one TensorDict row
    assert len(rb3) == 1 and rb3[:].batch_size == (1, 2)


def test_a_range_is_integers_and_the_default_storage_holds_1000_rows():
    rb = ReplayBuffer()
    assert isinstance(rb.storage, LazyTensorStorage) and rb.storage.max_size == 1000
    rb.extend(range(2000))
    assert len(rb) == 1000 and rb[0].item() == 1000 and rb[:].dtype == torch.int64


def test_add_takes_one_row_of_any_type(make):
    rb = ReplayBuffer(storage=make())
    assert rb.add({"x": torch.zeros(3), "y": (torch.ones(()),)}) == 0
    assert rb.add({"x": torch.ones(3), "y": (torch.zeros(()),)}) == 1
    assert_same_tree(rb[1], {"x": torch.ones(3), "y": (torch.zeros(()),)})
    rb_td = ReplayBuffer(storage=make())
    with pytest.warns(UserWarning, match=r"Use `extend\(\)` to add multiple elements"):
        rb_td.add(TensorDict({"a": torch.zeros(2)}, [2]))  # a row of batch [2], TorchRL's warning
    assert rb_td[:].batch_size == (1, 2)


@pytest.mark.parametrize(
    "first, second, match",
    [
        (torch.zeros(3), TensorDict({"a": torch.zeros(3)}, [3]), r"holds tensors \[n, \.\.\.\]"),
        (
            TensorDict({"a": torch.zeros(3)}, [3]),
            torch.zeros(3),
            r"holds TensorDict rows \[n\] \(fixed by its first write\), got a tensor \[3\]",
        ),
        (pytree(3), {"a": torch.zeros(3)}, "its structure differs"),
        (
            TensorDict({"a": torch.zeros(3, 2)}, [3, 2]),
            TensorDict({"a": torch.zeros(3, 4)}, [3, 4]),
            r"holds TensorDicts \[n, 2\]",
        ),
    ],
)
def test_a_later_write_of_another_type_changes_nothing(make, first, second, match):
    rb = ReplayBuffer(storage=make())
    rb.extend(first)
    before = (len(rb), rb.write_count, rb.storage.codec)
    with pytest.raises(DataStructureError, match=match):
        rb.extend(second)
    assert (len(rb), rb.write_count, rb.storage.codec) == before


@pytest.mark.parametrize(
    "data, match",
    [
        ({"a": torch.zeros(3), "b": "text"}, r"leaf \['b'\] is str 'text', not a tensor"),
        (
            {"a": torch.zeros(3), "b": torch.zeros(4)},
            r"leaf \['b'\] has 4 rows where the first leaf has 3",
        ),
        ({"a": torch.zeros(3), "b": torch.zeros(())}, r"leaf \['b'\] is a 0-dim tensor"),
        (
            [torch.zeros(4), torch.zeros(1)],
            "Stacking the elements of the list resulted in an error",
        ),
        ([], "extend got an empty list"),
        (TensorDict({"a": torch.zeros(())}, []), r"batch_size=\[\] \(a single row\); use add\(\)"),
    ],
)
def test_data_a_storage_cannot_hold_is_refused_and_nothing_changes(make, data, match):
    rb = ReplayBuffer(storage=make())
    with pytest.raises(DataStructureError, match=match):
        rb.extend(data)
    assert len(rb) == 0 and rb.storage.schema is None and rb.storage.codec is None
    rb.extend(torch.zeros(2))  # the first good write still fixes the type
    assert len(rb) == 2


def test_errors_are_both_value_and_runtime_errors():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    for err in (ValueError, RuntimeError):
        with pytest.raises(err, match="Stacking the elements"):
            rb.extend([torch.zeros(2), torch.zeros(3)])


def test_a_tensorclass_with_a_string_field_is_refused(make):
    rb = ReplayBuffer(storage=make())
    with pytest.raises(TypeError, match="key 'text' holds a NonTensorData, not a tensor"):
        rb.extend(Labelled(tensor=torch.zeros(3), text="hi", batch_size=[3]))
    assert len(rb) == 0


def test_a_ragged_lazy_stack_is_refused_clearly(make):
    rb = ReplayBuffer(storage=make())
    ragged = LazyStackedTensorDict(
        TensorDict(a=torch.rand(5, 4), batch_size=5),
        TensorDict(a=torch.rand(5, 3), batch_size=5),
        stack_dim=1,
    )
    with pytest.raises(
        DataStructureError, match="a lazy stack of TensorDicts whose entries differ in shape"
    ):
        rb.extend(ragged)
    assert len(rb) == 0


@pytest.mark.parametrize("kind", ["tensor", "pytree", "tensorclass", "tensordict2d"])
def test_checkpoints_keep_the_data_type(kind, tmp_path):
    data = {
        "tensor": torch.arange(6.0),
        "pytree": pytree(6),
        "tensorclass": Outer(
            key1=torch.ones(6, 2), next=Inner(key1=torch.zeros(6), batch_size=[6]), batch_size=[6]
        ),
        "tensordict2d": TensorDict({"a": torch.arange(12).view(6, 2)}, [6, 2]),
    }[kind]
    rb = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=3, generator=0)
    rb.extend(data)
    rb.dumps(tmp_path / "ckpt")
    twin = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=3, generator=1)
    twin.loads(tmp_path / "ckpt")  # into a storage never written: the type comes from the file
    assert_same_tree(twin.sample(), rb.sample())
    assert type(twin[0]) is type(rb[0])


@pytest.mark.parametrize(
    "make_tree",
    [
        lambda n: {("a", 1): torch.zeros(n, 2), "b": (torch.ones(n), torch.arange(n))},
        lambda n: {(("x", 2), "y"): torch.arange(n), 3: {("k",): torch.ones(n, 1)}},
        lambda n: collections.OrderedDict([((1, 2), torch.arange(n)), ("z", torch.ones(n))]),
        # a list comes back a list (tensordict registers a type of its own under its name)
        lambda n: {"l": [torch.arange(n), (torch.ones(n),)]},
    ],
    ids=["tuple-key", "nested-tuple-keys", "ordered-dict", "list"],
)
@pytest.mark.parametrize("how", ["dumps", "state_dict"])
def test_pytrees_with_tuple_keys_round_trip_exactly(make_tree, how, tmp_path):
    """JSON writes a tuple as a list: such a pytree used to load without error and then fail
    every read with ``unhashable type: 'list'``."""
    rb = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=3, generator=0)
    rb.extend(make_tree(6))
    twin = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=3, generator=0)
    if how == "dumps":
        rb.dumps(tmp_path / "ckpt")
        twin.loads(tmp_path / "ckpt")
    else:
        twin.load_state_dict(rb.state_dict())
    assert twin.storage.codec == rb.storage.codec
    assert_same_tree(twin.sample(), rb.sample())
    assert tree_flatten(twin[:2])[1] == tree_flatten(make_tree(2))[1]


def test_a_pytree_whose_keys_cannot_be_saved_is_refused_at_dumps(tmp_path):
    """Keys JSON cannot write (a frozenset) are refused when saving, and nothing is written."""
    rb = ReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend({frozenset({1}): torch.arange(4)})
    with pytest.raises(
        CheckpointError, match="the structure of this storage's pytree cannot be saved"
    ):
        rb.dumps(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()
    assert rb.sample(2)[frozenset({1})].shape == (2,)  # the buffer itself is unchanged


def test_a_checkpoint_of_another_type_is_refused_and_changes_nothing(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(torch.arange(4))
    rb.dumps(tmp_path / "ckpt")
    other = ReplayBuffer(storage=LazyTensorStorage(8))
    other.extend(TensorDict({"tensor": torch.arange(3)}, [3]))  # same schema, other type
    with pytest.raises(
        CheckpointError,
        match=r"the saved rows are tensors \[n, \.\.\.\], this storage holds TensorDict rows",
    ):
        other.loads(tmp_path / "ckpt")
    assert len(other) == 3 and other.storage.codec is None


def test_a_local_tensorclass_loads_only_into_a_storage_that_holds_it(tmp_path):
    @tensorclass
    class Local:
        x: torch.Tensor

    rb = ReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(Local(x=torch.arange(3), batch_size=[3]))
    rb.dumps(tmp_path / "ckpt")
    empty = ReplayBuffer(storage=LazyTensorStorage(8))
    with pytest.raises(
        CheckpointError, match=r"Local instances, and that class cannot be imported"
    ):
        empty.loads(tmp_path / "ckpt")
    assert len(empty) == 0
    holder = ReplayBuffer(storage=LazyTensorStorage(8))
    holder.add(Local(x=torch.tensor(7), batch_size=[]))
    holder.loads(tmp_path / "ckpt")
    assert type(holder[0]) is Local and holder[:].x.tolist() == [0, 1, 2]


def test_a_pickled_buffer_keeps_its_data_type():
    rb = ReplayBuffer(storage=LazyTensorStorage(8), generator=0)
    rb.extend(pytree(4))
    twin = pickle.loads(pickle.dumps(rb))
    assert_same_tree(twin[:], rb[:])


def test_tensor_storage_wraps_existing_data_of_any_type():
    td = TensorDict({"a": torch.randn(10, 11), ("n", "b"): torch.randn(10, 11, 2)}, [10, 11])
    s = TensorStorage(td)
    assert len(s) == s.max_size == 10 and s.get(0).batch_size == (11,)
    s.set(0, s.get(0).zero_())
    assert (s.get(0)["a"] == 0).all() and (s.get(1)["a"] == td["a"][1]).all()
    tree = TensorStorage(pytree(4))
    assert_same_tree(tree.get(range(4)), pytree(4))
    assert torch.equal(TensorStorage(torch.arange(3)).get(2), torch.tensor(2))


def test_tensor_storage_reads_its_data_with_the_device_it_was_given():
    """TorchRL's TensorStorage(data) reads rows as the data was built: a TensorDict (or
    tensorclass) without a device gives batches without one, the leaves on the storage's."""
    td = TensorDict({"a": torch.randn(6, 2)}, [6])
    s = TensorStorage(td)
    assert td.device is None and s.device == torch.device("cpu")
    assert s.get(0).device is None and s[1:3].device is None
    assert s[1:3]["a"].device == torch.device("cpu")
    batch = ReplayBuffer(storage=s, batch_size=2, generator=0).sample()
    assert batch.device is None and torch.equal(td["a"][0], s.get(0)["a"])
    tc = TensorStorage(Inner(key1=torch.arange(4), batch_size=[4]))
    assert tc.get(0).device is None
    assert TensorStorage(td.to("cpu")).get(0).device == torch.device("cpu")
    assert TensorStorage(td, device="cpu").get(0).device == torch.device("cpu")
    assert LazyTensorStorage(6).device == torch.device("cpu")
    ring = LazyTensorStorage(6)
    ring.extend(td)
    assert ring.get(0).device == torch.device("cpu")  # a ring's batches: its device


@pytest.mark.parametrize(
    "args, kwargs, err, match",
    [
        ((None,), {}, ValueError, "Expected storage to be non-null"),
        (
            (torch.zeros(3),),
            {"max_size": 4},
            ValueError,
            "The max-size and the storage shape mismatch",
        ),
        ((3,), {"max_size": 4}, TypeError, r"the capacity is given twice"),
        ((torch.zeros(()),), {}, ValueError, r"needs rows along a first dimension"),
    ],
)
def test_tensor_storage_arguments(args, kwargs, err, match):
    with pytest.raises(err, match=match):
        TensorStorage(*args, **kwargs)


def test_tensor_storage_still_takes_a_capacity():
    for s in (TensorStorage(3), TensorStorage(max_size=3)):
        assert s.max_size == 3 and len(s) == 0


def test_mixing_buffers_take_tensordict_rows_only():
    offline = OfflineDataset.from_tensordict(TensorDict({"x": torch.zeros(10)}, [10]))
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=10, generator=0)
    with pytest.raises(TypeError, match="extend expects a TensorDict of rows, got Tensor"):
        rb.extend(torch.zeros(3))
    mix = MixtureReplayBuffer({"a": LazyTensorStorage(4)}, {"a": 1.0}, generator=0)
    with pytest.raises(TypeError, match="extend expects a TensorDict of rows, got dict"):
        mix.extend({"x": torch.zeros(3)}, source="a")
    assert len(rb) == 10 and len(mix) == 0


# -- invariants (hypothesis) ---------------------------------------------------------------

_dtypes = st.sampled_from(
    [torch.float32, torch.float64, torch.int64, torch.int8, torch.bool, torch.float16]
)
_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


@st.composite
def trees(draw, n):
    def leaf():
        dtype = draw(_dtypes)
        shape = draw(_shapes)
        return (torch.rand(n, *shape) * 10).to(dtype)

    kind = draw(st.sampled_from(["tensor", "dict", "tuple", "nested"]))
    if kind == "tensor":
        return leaf()
    if kind == "dict":
        return {f"k{i}": leaf() for i in range(draw(st.integers(1, 3)))}
    if kind == "tuple":
        return tuple(leaf() for _ in range(draw(st.integers(1, 3))))
    return {"a": [leaf(), (leaf(),)], 7: {"b": leaf()}}


@given(data=st.data(), n=st.integers(1, 12), capacity=st.integers(1, 8))
@settings(max_examples=40, deadline=None)
def test_any_pytree_round_trips_through_a_ring(data, n, capacity):
    tree = data.draw(trees(n))
    rb = ReplayBuffer(storage=LazyTensorStorage(capacity), generator=0)
    index = rb.extend(tree)
    kept = min(n, capacity)
    assert len(rb) == kept and index.numel() == n
    # the ring keeps the last rows, in slot order
    order = torch.arange(n - kept, n)
    slots = torch.arange(n)[-kept:] % capacity
    expected = tree_map(lambda x: x[order[torch.argsort(slots)]], tree)
    assert_same_tree(rb[:], expected)


def test_nothing_of_a_default_memmap_storage_is_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    rb = ReplayBuffer(storage=LazyMemmapStorage(10))
    rb.extend(pytree(3))
    assert os.listdir(tmp_path) == [] and rb.storage.filename is None
    assert_same_tree(rb[:], pytree(3))

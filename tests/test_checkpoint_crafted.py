"""Crafted and damaged checkpoints (checksum recomputed, so it passes): every one is a
``CheckpointError`` naming what is wrong, and the buffer is exactly as before (issue 18, item 7).

The checks live with the owners of the state (schema parsing, samplers, storages, buffers);
``loads`` also converts anything they miss, but the tests here load the decoded state with
``load_state_dict``, which has no such guard, so a missing check fails them.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import random
import shutil
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict, tensorclass

from mixreplay import (
    CheckpointError,
    LazyMemmapStorage,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SchemaMismatchError,
    SliceSampler,
)
from mixreplay.checkpoint import load_into, load_state
from mixreplay.persist.container import _checksum
from mixreplay.schedules import Cosine, Linear
from tests.helpers import OFFLINE_BASE, assert_state_equal, id_rows

METADATA = "metadata.json"
OFFLINE = OfflineDataset.from_tensordict(id_rows(OFFLINE_BASE, 30))


def _o2o(scratch):
    return OfflineToOnlineReplayBuffer(
        OFFLINE,
        online_capacity=10,
        offline_fraction=Linear(0.9, 0.1, 20),
        batch_size=10,
        generator=5,
    )


def _o2o_prioritized(scratch):
    return OfflineToOnlineReplayBuffer(
        OFFLINE,
        online_capacity=10,
        offline_fraction=0.4,
        batch_size=10,
        generator=5,
        online_sampler=PrioritizedSampler(alpha=0.7, beta=0.5),
    )


def _slices(scratch):
    return ReplayBuffer(
        storage=LazyTensorStorage(20),
        sampler=SliceSampler(slice_len=2, end_key=("next", "done")),
        batch_size=4,
        generator=1,
    )


def _without_replacement(scratch):
    return ReplayBuffer(
        storage=LazyTensorStorage(20),
        sampler=SamplerWithoutReplacement(),
        batch_size=4,
        generator=1,
    )


def _dedup(scratch):
    return ReplayBuffer(storage=LazyTensorStorage(20, dedup_next=True), batch_size=4, generator=1)


def _memmap(scratch):
    return ReplayBuffer(
        storage=LazyMemmapStorage(20, scratch_dir=scratch), batch_size=4, generator=1
    )


def _mixture(scratch):
    return MixtureReplayBuffer(
        {"off": OFFLINE, "a": LazyTensorStorage(10), "b": LazyTensorStorage(13)},
        {"off": Cosine(0.8, 0.2, 15), "a": 1.0, "b": 2.0},
        samplers={"b": PrioritizedSampler(alpha=0.5)},
        batch_size=12,
        generator=9,
        source_key="src",
    )


def _torchrl(scratch):
    from torchrl.data import LazyTensorStorage as TorchRLStorage

    return OfflineToOnlineReplayBuffer(
        OFFLINE, online_storage=TorchRLStorage(10), batch_size=8, generator=4
    )


BUILDERS = {
    "o2o": _o2o,
    "o2o-prioritized": _o2o_prioritized,
    "slices": _slices,
    "without-replacement": _without_replacement,
    "dedup": _dedup,
    "memmap": _memmap,
    "mixture": _mixture,
    "torchrl": pytest.param(_torchrl, marks=pytest.mark.torchrl),
}


def _write(rb, start, n):
    if isinstance(rb, MixtureReplayBuffer):
        rb.extend(id_rows(start, n), source="a" if start % 2 else "b")
    else:
        rb.extend(id_rows(start, n))


def _use(rb):
    """Write and sample: what a loaded buffer must still do."""
    _write(rb, 1000, 5)
    rb.sample()
    _write(rb, 1005, 25)
    rb.sample()
    if hasattr(rb, "set_step"):
        rb.set_step(3)
        rb.sample()


def _save(make, directory: Path) -> Path:
    rb = make(directory)
    _write(rb, 0, 12)
    rb.sample()
    _write(rb, 12, 9)  # wraps the 10-row rings
    rb.sample()
    rb.dumps(directory / "ck")
    return directory / "ck"


def _rewrite(path: Path, edit) -> None:
    """Edit the saved state and recompute the checksum, as a crafter would."""
    meta = json.loads((path / METADATA).read_text())
    del meta["checksum"]
    edit(meta["state"])
    meta["checksum"] = _checksum(meta)
    (path / METADATA).write_text(json.dumps(meta))


def _buffers(make, scratch):
    """A fresh buffer and one holding other rows: both must come out of a refusal unchanged."""
    fresh, filled = make(scratch), make(scratch)
    _write(filled, 500, 3)
    return {"fresh": fresh, "filled": filled}


# -- the cases the campaign found, and their kin ---------------------------------------------


def _online(state):
    return state["sources"]["online"]


def _field(i, **change):
    return lambda s: _online(s)["storage"]["schema"][i].update(change)


CRAFTED = {
    "a schema key that is empty": (
        _field(0, key=[]),
        r"source 'online': storage: the saved schema is invalid \(schema field 0: the key must "
        r"be a non-empty list of strings, got list \[\]\)",
    ),
    "a schema key with a non-string part": (
        _field(5, key=["next", 1]),
        r"schema field 5: the key must be a non-empty list of strings, got list \['next', 1\]",
    ),
    "a schema key that is a string": (
        _field(0, key="observation"),
        r"schema field 0: the key must be a non-empty list of strings, got str 'observation'",
    ),
    "a negative dimension": (
        _field(0, shape=[-3]),
        r"schema field 0 \('observation'\): the shape must be a list of ints >= 0, got list \[-3\]",
    ),
    "a dimension that is a bool": (
        _field(2, shape=[True]),
        r"schema field 2 \('done'\): the shape must be a list of ints >= 0, got list \[True\]",
    ),
    "a dtype that is not a name": (
        _field(1, dtype=8),
        r"schema field 1 \('action'\): unknown dtype name 8 in a schema",
    ),
    "a schema field with an extra entry": (
        _field(1, device="cuda"),
        r"schema field 1 must be an object with keys 'dtype', 'key' and 'shape'",
    ),
    "a schema that is not a list": (
        lambda s: _online(s)["storage"].update(schema={"observation": [3]}),
        r"the saved schema is invalid \(a schema is a list of fields, got dict",
    ),
    "a sampler config that is a list": (
        lambda s: _online(s)["sampler"].update(config=[1, 2]),
        r"source 'online': sampler: the saved sampler config must be a dict, got list \[1, 2\]",
    ),
    "a sampler config that is a string": (
        lambda s: _online(s)["sampler"].update(config="uniform"),
        r"sampler: the saved sampler config must be a dict, got str 'uniform'",
    ),
    "a sampler state that is not a dict": (
        lambda s: _online(s)["sampler"].update(state=[1]),
        r"sampler: the saved sampler state must be a dict, got list \[1\]",
    ),
}


@pytest.mark.parametrize("buffer", ["fresh", "filled"])
@pytest.mark.parametrize("what", sorted(CRAFTED))
def test_a_crafted_checkpoint_is_a_checkpoint_error_and_changes_nothing(tmp_path, what, buffer):
    path = _save(_o2o, tmp_path)
    edit, match = CRAFTED[what]
    _rewrite(path, edit)
    rb = _buffers(_o2o, tmp_path)[buffer]
    before = rb.state_dict()
    with pytest.raises(CheckpointError, match=match) as info:
        rb.load_state_dict(load_state(path))
    assert info.value.__cause__ is None  # the owner's own check, not a converted exception
    assert_state_equal(before, rb.state_dict())
    with pytest.raises(CheckpointError, match=f"cannot load {path}: .*{match}"):
        rb.loads(path)
    assert_state_equal(before, rb.state_dict())


def test_a_crafted_without_replacement_state_is_refused(tmp_path):
    path = _save(_without_replacement, tmp_path)
    rb = _without_replacement(tmp_path)
    cases = {
        "started": ("yes", r"'started' and 'ran_out' must be True or False, got 'yes', False"),
        "ran_out": (1, r"'started' and 'ran_out' must be True or False, got True, 1"),
        "pos": (-1, r"'pos' and 'len' must be ints >= 0, got -1, 20"),
    }
    for key, (value, match) in cases.items():
        state = load_state(path)
        state["sampler"]["state"][key] = value
        with pytest.raises(CheckpointError, match=match):
            rb.load_state_dict(state)
    state = load_state(path)
    order = state["sampler"]["state"]["order"]
    order[1] = order[0]  # a row twice: an epoch would serve it twice
    with pytest.raises(CheckpointError, match=r"'order' repeats a row; it must be a permutation"):
        rb.load_state_dict(state)


@pytest.mark.torchrl
def test_a_crafted_torchrl_storage_state_is_refused(tmp_path):
    path = _save(_torchrl, tmp_path)
    rb = _torchrl(tmp_path)
    before = rb.state_dict()

    def columns(s):
        return _online(s)["storage"]["columns"]

    cases = [
        (
            lambda s: columns(s)[0].update(key=["next", 0]),
            r"the saved column 0 \(key \['next', 0\]\) names no key of the schema",
        ),
        (
            lambda s: columns(s).pop(),
            r"must hold one column per key of its schema \(10\), got list",
        ),
        (
            lambda s: columns(s)[1].update(key=columns(s)[0]["key"]),
            r"the saved column 1 \(key \['observation'\]\) names no key of the schema, or one named before",
        ),
        (
            lambda s: columns(s)[0].update(value=columns(s)[0]["value"][:3]),
            r"the saved column \['observation'\] must be a torch.float32\[10, 3\] tensor, got "
            r"torch.float32\[3, 3\]",
        ),
        (
            lambda s: _online(s)["storage"].update(cursor=10),
            r"inconsistent ring \(len=10, cursor=10, write_count=21, max_size=10\)",
        ),
        (
            lambda s: _online(s)["storage"]["schema"][0].update(key=[]),
            r"the saved schema is invalid \(schema field 0: the key must be a non-empty list",
        ),
    ]
    for edit, match in cases:
        state = load_state(path)
        edit(state)
        with pytest.raises(CheckpointError, match=match):
            rb.load_state_dict(state)
        assert_state_equal(before, rb.state_dict())


def test_a_mixture_state_with_a_malformed_carry_or_fraction_is_refused(tmp_path):
    path = _save(_mixture, tmp_path)
    rb = _mixture(tmp_path)
    state = load_state(path)
    state["carry"]["live"] = 0.5
    with pytest.raises(CheckpointError, match=r"carry must hold 3 finite numbers and live source"):
        rb.load_state_dict(state)
    state = load_state(path)
    state["carry"]["live"] = [7]
    with pytest.raises(CheckpointError, match=r"carry live source indices must be below 3, got"):
        rb.load_state_dict(state)
    # a saved schedule is what the saved run mixed with: it replaces the buffer's weight
    state = load_state(path)
    state["fractions"]["b"] = {"schedule": {"type": "Constant", "value": 0.5}}
    rb.load_state_dict(state)
    assert rb.state_dict()["fractions"]["b"] == {"schedule": {"type": "Constant", "value": 0.5}}


class _Unchecked:
    """Something loadable whose own checks miss a malformed state (a third-party part)."""

    def load_state_dict(self, state, *, allow_offline_mismatch=False):
        return state["no such key"]


def test_loads_turns_an_exception_its_checks_missed_into_a_checkpoint_error(tmp_path, caplog):
    path = _save(_o2o, tmp_path)
    with caplog.at_level(logging.WARNING, logger="mixreplay.checkpoint"):
        with pytest.raises(
            CheckpointError,
            match=rf"cannot load {path}: the saved state does not fit \(KeyError: 'no such key'\); "
            "the checkpoint is damaged or was not written by mixreplay",
        ) as info:
            load_into(_Unchecked(), path)
    assert isinstance(info.value.__cause__, KeyError)  # the original is chained
    assert "got past the checks" in caplog.text


# -- property: any single edit of any saved state ------------------------------------------

REPLACEMENTS = [
    None,
    -1,
    0,
    1,
    2**63,
    1.5,
    -0.0,
    1e300,
    "x",
    "",
    [],
    {},
    [1],
    ["a"],
    [[]],
    True,
    {"a": 1},
    [-1],
    [0],
    "float32",
    "int64",
    "bool",
]
DELETE = object()


def _nodes(obj, path=()):
    if path:
        yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _nodes(v, (*path, i))


def _set(obj, path, value):
    for p in path[:-1]:
        obj = obj[p]
    if value is DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = copy.deepcopy(value)


def _retype(state, path, rng):
    """Give one tensor entry another dtype over the same bytes (its CRC still matches)."""
    node = state
    for p in path:
        node = node[p]
    entry = node["__tensor__"]
    dtype = rng.choice(
        [
            torch.float64,
            torch.int64,
            torch.uint8,
            torch.int8,
            torch.float32,
            torch.int32,
            torch.bool,
            torch.float16,
        ]
    )
    if entry["nbytes"] % dtype.itemsize:
        return
    entry["dtype"] = str(dtype).removeprefix("torch.")
    entry["shape"] = [entry["nbytes"] // dtype.itemsize] if entry["shape"] else []
    if entry["shape"] == [] and entry["nbytes"] != dtype.itemsize:
        entry["shape"] = [entry["nbytes"] // dtype.itemsize]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("crafted")
    out = {}
    for name, make in BUILDERS.items():
        make = make.values[0] if hasattr(make, "values") else make
        directory = root / name
        directory.mkdir()
        out[name] = (make, _save(make, directory), directory)
    return out


@pytest.mark.parametrize("kind", list(BUILDERS))
@given(data=st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_single_edit_of_a_saved_state_loads_or_is_a_checkpoint_error(saved, kind, data):
    make, original, scratch = saved[kind]
    meta = json.loads((original / METADATA).read_text())
    del meta["checksum"]
    state = meta["state"]
    paths = list(_nodes(state))
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    path = data.draw(st.sampled_from(paths), label="path")
    if (
        isinstance(state_at := _get(state, path), dict)
        and "__tensor__" in state_at
        and rng.random() < 0.5
    ):
        _retype(state, path, rng)
    else:
        value = data.draw(st.sampled_from([DELETE, *REPLACEMENTS]), label="value")
        _set(state, path, value)
    meta["checksum"] = _checksum(meta)
    path_ck = scratch / "edited"
    shutil.rmtree(path_ck, ignore_errors=True)
    shutil.copytree(original, path_ck)
    (path_ck / METADATA).write_text(json.dumps(meta))
    for rb in _buffers(make, scratch).values():
        before = rb.state_dict()
        try:
            decoded = load_state(path_ck)
            rb.load_state_dict(decoded)
        except CheckpointError as err:
            assert err.__cause__ is None or isinstance(err.__cause__, CheckpointError), err
            assert_state_equal(before, rb.state_dict())
            continue
        try:
            _use(rb)
        except SchemaMismatchError as err:  # a valid schema with other keys: writes must match it
            assert "[-" not in str(err)
    shutil.rmtree(path_ck)


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


# -- the saved data type (the storage's codec) --------------------------------------------


@tensorclass
class Obs:
    a: torch.Tensor
    b: torch.Tensor


def _obs(n=10):
    return Obs(a=torch.arange(float(n)).unsqueeze(-1), b=torch.ones(n, 2), batch_size=[n])


def _tree(n=10):
    return {"p": torch.zeros(n, 1), "q": torch.ones(n, 2)}


def _codec(state):
    return state["storage"]["codec"]


def _spec_renaming(old, new):
    """An edit of the saved structure (its dict keys are JSON inside JSON: quotes escaped)."""
    return lambda s: _codec(s).update(spec=_codec(s)["spec"].replace(old, new))


CODECS = {
    "a tensorclass codec naming a dict class": (
        _obs,
        lambda s: _codec(s).update({"class": "collections:OrderedDict"}),
        r"\('codec'\) is invalid: 'class' names collections:OrderedDict, which is not a "
        r"tensorclass",
    ),
    "a tensorclass codec naming TensorDict": (
        _obs,
        lambda s: _codec(s).update({"class": "tensordict:TensorDict"}),
        r"'class' names tensordict:TensorDict, which is not a tensorclass",
    ),
    "a tensorclass codec naming a function": (
        _obs,
        lambda s: _codec(s).update({"class": "json:dumps"}),
        r"'class' names json:dumps, which is not a tensorclass",
    ),
    "a tensorclass codec naming no class": (
        _obs,
        lambda s: _codec(s).update({"class": "os.system"}),
        r"'class' must be 'module:ClassName', got 'os.system'",
    ),
    "a tensorclass codec without its class": (
        _obs,
        lambda s: _codec(s).pop("class"),
        r"a saved tensorclass codec must hold 'class' \('module:ClassName' of a tensorclass\)",
    ),
    "a tensorclass codec with another row batch": (
        _obs,
        lambda s: _codec(s).update(row_batch=[3]),
        r"'row_batch' is \[3\], but the rows' key a has shape \[1\], which does not begin with it",
    ),
    "a tensorclass codec with a row batch that is not a list": (
        _obs,
        lambda s: _codec(s).update(row_batch=3),
        r"'row_batch' of a saved tensorclass codec must be a list of ints >= 0, got 3",
    ),
    "a tensorclass codec naming a nested field the rows lack": (
        _obs,
        lambda s: _codec(s)["nested"].update(
            a={"kind": "tensorclass", "class": _codec(s)["class"], "row_batch": [], "nested": {}}
        ),
        r"'nested' names the field 'a', which the rows or .*Obs do not hold as a nested",
    ),
    "a tensordict codec with a row batch the rows lack": (
        lambda n=10: TensorDict({"x": torch.zeros(n, 2, 3)}, [n, 2]),
        lambda s: _codec(s).update(row_batch=[3]),
        r"'row_batch' is \[3\], but the rows' key x has shape \[2, 3\]",
    ),
    "pytree keys swapped": (
        _tree,
        lambda s: _codec(s).update(keys=list(reversed(_codec(s)["keys"]))),
        r"'keys' are \[\"\['q'\]\", \"\['p'\]\"\], but the saved 'spec' names the leaves "
        r"\[\"\['p'\]\", \"\['q'\]\"\]",
    ),
    "pytree keys renamed": (
        _tree,
        lambda s: _codec(s).update(keys=["['zz']", "['q']"]),
        r"'keys' are \[\"\['zz'\]\", \"\['q'\]\"\], but the saved 'spec' names the leaves",
    ),
    "pytree spec made a list": (
        _tree,
        _spec_renaming('"builtins.dict"', '"builtins.list"'),
        r"but the saved 'spec' names the leaves \['\[0\]', '\[1\]'\]",
    ),
    "pytree spec and keys renamed alike": (
        _tree,
        lambda s: (
            _spec_renaming('\\"p\\"', '\\"zz\\"')(s),
            _codec(s).update(keys=["['zz']", "['q']"]),
        ),
        r"'keys' are \[\"\['zz'\]\", \"\['q'\]\"\], but the rows hold the keys "
        r"\[\"\['p'\]\", \"\['q'\]\"\]",
    ),
    "a pytree codec without its keys": (
        _tree,
        lambda s: _codec(s).pop("keys"),
        r"a saved pytree codec must hold 'keys' \(the list of the leaves' keys\); it has none",
    ),
    "a pytree codec whose spec is not a string": (
        _tree,
        lambda s: _codec(s).update(spec=[1]),
        r"'spec' of a saved pytree codec must be a structure saved by torch's treespec_dumps, "
        r"got \[1\]",
    ),
    "a tensor codec on rows without a 'tensor' key": (
        _tree,
        lambda s: s["storage"].update(codec={"kind": "tensor"}),
        r"the codec is 'tensor' \(rows of one key 'tensor'\), but the rows hold the keys "
        r"\[\"\['p'\]\", \"\['q'\]\"\]",
    ),
}


def _codec_buffers(data):
    fresh = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=4, generator=0)
    filled = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=4, generator=0)
    filled.extend(data(3))
    return fresh, filled


@pytest.mark.parametrize("what", sorted(CODECS))
def test_a_crafted_codec_is_refused_naming_the_field_and_changes_nothing(tmp_path, what):
    data, edit, match = CODECS[what]
    rb = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=4, generator=0)
    rb.extend(data())
    rb.dumps(tmp_path / "ck")
    _rewrite(tmp_path / "ck", edit)
    for target in _codec_buffers(data):
        before = target.state_dict()
        with pytest.raises(CheckpointError, match=match):
            target.load_state_dict(load_state(tmp_path / "ck"))
        assert_state_equal(before, target.state_dict())
        with pytest.raises(CheckpointError, match=rf"cannot load .*storage: .*{match}"):
            target.loads(tmp_path / "ck")
        assert_state_equal(before, target.state_dict())
        if len(target):
            assert type(target.sample()) is type(data(1))  # still usable


def test_a_checkpoint_never_imports_the_module_its_tensorclass_names(tmp_path, monkeypatch):
    module = "mixreplay_crafted_side_effect"
    marker = tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(
        "import pathlib\n"
        "import torch\n"
        "from tensordict import tensorclass\n"
        f"pathlib.Path({str(marker)!r}).write_text('side effect')\n"
        "@tensorclass\n"
        "class Obs:\n"
        "    a: torch.Tensor\n"
        "    b: torch.Tensor\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    rb = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=4, generator=0)
    rb.extend(_obs())
    rb.dumps(tmp_path / "ck")
    _rewrite(tmp_path / "ck", lambda s: _codec(s).update({"class": f"{module}:Obs"}))
    fresh = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=4, generator=0)
    with pytest.raises(
        CheckpointError,
        match=rf"the saved rows are {module}:Obs instances, and that class cannot be imported "
        rf"\(its module {module} is not imported, and a checkpoint never imports code: import "
        rf"{module} before loading\)",
    ):
        fresh.loads(tmp_path / "ck")
    assert not marker.exists() and module not in sys.modules and len(fresh) == 0
    # imported by the program itself, the class is found and the rows load as it
    imported = importlib.import_module(module)
    fresh.loads(tmp_path / "ck")
    assert type(fresh.sample()) is imported.Obs and len(fresh) == 10


@pytest.mark.parametrize("value", [1, 3, 2**31, 2**63])
def test_a_saved_batch_size_the_sampler_cannot_draw_is_refused(value):
    """TorchRL's "_batch_size" is restored by a load: one its slice sampler cannot draw (not a
    multiple of slice_len) or no batch at all (2**63) loaded, then every sample() failed."""
    rb = _slices(None)
    _write(rb, 0, 12)
    state = rb.state_dict()
    state["_batch_size"] = value
    before = rb.state_dict()
    with pytest.raises(CheckpointError, match=f"_batch_size {value} is not a batch"):
        rb.load_state_dict(state)
    assert_state_equal(before, rb.state_dict())
    rb.sample()

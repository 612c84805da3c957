"""Checkpoints name samplers, storages and schedules by registered names; older ones migrate.

``tests/fixtures/v2`` holds checkpoints written by mixreplay at 46f74ce (format 2, which
named samplers by module path, e.g. ``mixreplay.samplers.prioritized.PrioritizedSampler``),
one per sampler, storage kind and schedule kind, written by
``tests/fixtures/make_v2_fixtures.py`` with the batches each buffer drew next. Loaded now,
each draws exactly those batches. (Format 1 is tested in ``test_checkpoint.py``.)
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    CheckpointError,
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    Sampler,
)
from mixreplay.checkpoint import FORMAT

FIXTURES = Path(__file__).parent / "fixtures" / "v2"
METADATA = "metadata.json"


def _maker():
    spec = importlib.util.spec_from_file_location(
        "make_v2_fixtures", FIXTURES.parent / "make_v2_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKE = _maker()


def _types(state, key):
    """Every ``"type"`` saved under ``key`` anywhere in a checkpoint's state."""
    if isinstance(state, dict):
        here = [state[key]["type"]] if isinstance(state.get(key), dict) else []
        return here + [t for v in state.values() for t in _types(v, key)]
    return []


@pytest.mark.parametrize("name", MAKE.NAMES)
def test_format_2_checkpoints_load_and_draw_what_the_old_version_drew(name, tmp_path):
    expected = json.loads((FIXTURES / "next_batches.json").read_text())[name]
    saved = json.loads((FIXTURES / name / METADATA).read_text())
    assert saved["format_version"] == 2
    path = tmp_path / name
    shutil.copytree(FIXTURES / name, path)  # a load may recover or clean up: never in the tree
    rb = MAKE.build(name, tmp_path)
    rb.loads(path)
    drawn = MAKE.draw(rb)
    if name == "replay_memmap_distinct":
        # RandomSampler(replacement=False) drew n distinct rows per batch and kept no
        # state; it now means TorchRL's epochs and resumes at the start of a fresh one
        first_epoch = [i for batch in drawn[:2] for i in batch["info.index"]]
        assert sorted(first_epoch) == list(range(len(rb)))
    else:  # the same rows; info may carry keys added since (priority_weight)
        assert [{k: b[k] for k in e} for b, e in zip(drawn, expected)] == expected
    rb.dumps(tmp_path / "again")  # and is saved in the current format, by registered names
    meta = json.loads((tmp_path / "again" / METADATA).read_text())
    assert meta["format_version"] == FORMAT.version == 3
    old, new = _types(saved["state"], "sampler"), _types(meta["state"], "sampler")
    assert old and all(t.startswith("mixreplay.samplers.") for t in old)
    renamed = {"RandomSampler": "SamplerWithoutReplacement"} if name.endswith("distinct") else {}
    assert new == [renamed.get(n, n) for n in (t.rpartition(".")[2] for t in old)]


def test_the_fixtures_cover_every_sampler_and_storage_kind():
    states = [json.loads((FIXTURES / n / METADATA).read_text())["state"] for n in MAKE.NAMES]
    samplers = {t.rpartition(".")[2] for s in states for t in _types(s, "sampler")}
    storages = {t for s in states for t in _types(s, "storage")}
    assert samplers == {
        "PrioritizedSampler",
        "RandomSampler",
        "SamplerWithoutReplacement",
        "SliceSampler",
    }
    assert {"LazyTensorStorage", "LazyMemmapStorage", "FrozenStorage"} <= storages


def rows(n):
    return TensorDict({"x": torch.arange(n, dtype=torch.float32).unsqueeze(-1)}, [n])


def test_samplers_and_storages_are_saved_under_their_registered_names():
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=PrioritizedSampler())
    rb.extend(rows(3))
    state = rb.state_dict()
    assert state["sampler"]["type"] == PrioritizedSampler.config_name == "PrioritizedSampler"
    assert state["storage"]["type"] == LazyTensorStorage.config_name == "LazyTensorStorage"


class Newest(Sampler):
    """A user's sampler (it draws the newest row), as defined in the user's module."""

    def sample(self, storage, n, generator):
        return torch.full((n,), (storage.cursor - 1) % storage.max_size)


def _moved(cls, module, **attrs):
    """The same class, defined again elsewhere (moved to another module, or renamed)."""
    return type(attrs.pop("name", cls.__name__), (cls,), {"__module__": module, **attrs})


def test_a_checkpoint_survives_moving_its_sampler_class_to_another_module(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=Newest(), generator=0)
    rb.extend(rows(5))
    rb.dumps(tmp_path / "ck")
    moved = _moved(Newest, "somewhere.else")
    twin = ReplayBuffer(storage=LazyTensorStorage(8), sampler=moved(), generator=1)
    twin.loads(tmp_path / "ck")
    assert twin.sample(2)["x"].squeeze(-1).tolist() == [4.0, 4.0]


def test_a_renamed_sampler_keeps_its_checkpoints_by_setting_config_name(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=Newest(), generator=0)
    rb.extend(rows(5))
    rb.dumps(tmp_path / "ck")
    renamed = _moved(Newest, __name__, name="Latest")
    with pytest.raises(
        CheckpointError,
        match="saved with a Newest, this buffer samples with a Latest; build the buffer with the same sampler",
    ):
        ReplayBuffer(storage=LazyTensorStorage(8), sampler=renamed()).loads(tmp_path / "ck")
    kept = _moved(Newest, __name__, name="Latest", config_name="Newest")
    ReplayBuffer(storage=LazyTensorStorage(8), sampler=kept()).loads(tmp_path / "ck")


def test_a_state_naming_its_sampler_by_module_path_still_loads():
    """A format-2 state held in memory (not migrated by a file read) is read the same way."""
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=RandomSampler(), generator=0)
    rb.extend(rows(5))
    state = rb.state_dict()
    state["sampler"]["type"] = "mixreplay.samplers.RandomSampler"
    twin = ReplayBuffer(storage=LazyTensorStorage(8), generator=1)
    twin.load_state_dict(state)
    assert torch.equal(twin.sample(4)["x"], rb.sample(4)["x"])

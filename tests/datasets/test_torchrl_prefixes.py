"""The TorchRL prefixes mixreplay has no loader of its own for open through TorchRL's classes.

TorchRL's datasets download from the network; here each opens the copy TorchRL keeps
in its ``root`` (TorchRL's own on-disk format: ``TensorDict.memmap``), as TorchRL does
on every load after the first, and mixes with online rows as a foreign source.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from tensordict import TensorDict

from mixreplay import MissingDependencyError, OfflineToOnlineReplayBuffer, load_dataset
from mixreplay.datasets import get_entry
from mixreplay.datasets.torchrl_sources import TORCHRL_DATASETS, TorchRLDataset
from tests.conftest import ted_rows
from tests.datasets.conftest import dataset_cli

pytestmark = [
    pytest.mark.torchrl,
    # TorchRL's dataset modules import its collectors, which warn about themselves (torchrl 0.14.1)
    pytest.mark.filterwarnings(
        "ignore:Creating .* which inherits from WeightUpdaterBase:DeprecationWarning"
    ),
]


def test_the_registry_matches_torchrls():
    from torchrl.data.datasets import utils as torchrl_registry

    theirs = dict(torchrl_registry._DATASET_REGISTRY)
    assert set(theirs) <= set(get_entry(p).prefix for p in theirs)  # every prefix resolves
    for prefix, target in TORCHRL_DATASETS.items():
        assert theirs[prefix] == target
        entry = get_entry(prefix)
        # stored as TorchRL stores it (a lazy string), opened through mixreplay's wrapper
        assert entry.target == target
        assert isinstance(entry.resolve(), TorchRLDataset) and entry.resolve().target == target
    assert set(theirs) - set(TORCHRL_DATASETS) == {"minari", "d4rl"}  # native in mixreplay


@pytest.mark.parametrize("prefix", sorted(TORCHRL_DATASETS))
def test_each_prefix_resolves_to_torchrls_class(prefix):
    import importlib

    module, _, name = TORCHRL_DATASETS[prefix].partition(":")
    assert get_entry(prefix).resolve().resolve() is getattr(importlib.import_module(module), name)
    assert get_entry(prefix).accepts("root") or prefix in ("openx",)


def test_gen_dgrl_opens_through_torchrl_and_mixes(tmp_path):
    ted_rows(30).memmap(str(tmp_path / "bigfish-1M_E"))  # TorchRL's copy, as it keeps it
    ds = load_dataset("GEN_DGRL:bigfish-1M_E", root=tmp_path, download=False, batch_size=4)
    from torchrl.data.datasets import GenDGRLExperienceReplay

    assert isinstance(ds, GenDGRLExperienceReplay) and len(ds) == 30
    rb = OfflineToOnlineReplayBuffer(
        ds, online_capacity=100, batch_size=8, generator=0, source_key="source"
    )
    rb.extend(ted_rows(10, tag=1.0))
    batch = rb.sample()
    assert batch["source"].tolist() == [0] * 4 + [1] * 4
    assert (batch["action"][:4] == 0).all() and (batch["action"][4:] == 1).all()
    assert "index" not in batch.keys()  # TorchRL's bookkeeping key stays out of the batch


def test_openml_opens_through_torchrl_without_a_batch_size(tmp_path):
    rows = TensorDict({"X": torch.randn(20, 4), "y": torch.randint(0, 3, (20,))}, [20])
    rows.memmap(str(tmp_path / "adult_num"))
    ds = load_dataset("openml:adult_num", root=tmp_path)  # TorchRL requires batch_size; we do not
    assert len(ds) == 20 and ds.sample(5)["X"].shape == (5, 4)


def test_inspect_and_convert_a_torchrl_dataset(tmp_path, capsys, monkeypatch, registry):
    from mixreplay import DatasetError

    ted_rows(30).memmap(str(tmp_path / "bigfish-1M_E"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        DatasetError,
        match=r"^--keys does not apply to gen_dgrl: IDs \(their loader, "
        r"torchrl.data.datasets.gen_dgrl:GenDGRLExperienceReplay, takes no 'keys' option\)$",
    ):
        dataset_cli(["inspect", "gen_dgrl:bigfish-1M_E", "--keys", "x"])
    # the command line has no --root: a one-line prefix points TorchRL at its copy here
    registry.register_dataset(
        "local_dgrl",
        lambda name, download=True: get_entry("gen_dgrl").open(
            name, root=tmp_path, download=download
        ),
    )
    assert dataset_cli(["inspect", "local_dgrl:bigfish-1M_E", "--no-download"]) == 0
    assert "rows          30" in capsys.readouterr().out
    assert dataset_cli(["convert", "local_dgrl:bigfish-1M_E", "out", "--no-download"]) == 0
    copy = load_dataset(f"memmap:{tmp_path / 'out'}")
    assert len(copy) == 30
    assert torch.equal(copy[:]["next", "reward"], ted_rows(30)["next", "reward"])
    assert "index" not in copy.schema.keys()


def test_without_torchrl_the_prefix_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchrl", None)
    with pytest.raises(
        MissingDependencyError,
        match=r"the dataset source 'atari' opens through TorchRL "
        r"\(torchrl.data.datasets.atari_dqn:AtariDQNExperienceReplay\), which is not installed\. "
        r"Install it with: pip install \"mixreplay\[torchrl\]\"$",
    ):
        load_dataset("atari:Pong/5", batch_size=4)


def test_a_dependency_torchrl_checks_is_a_missing_dependency_error(tmp_path, monkeypatch):
    # TorchRL's Roboset checks for h5py and huggingface_hub when built: hide h5py
    import torchrl.data.datasets.roboset as roboset

    monkeypatch.setattr(roboset, "_has_h5py", False)
    with pytest.raises(
        MissingDependencyError,
        match=r"TorchRL's RobosetExperienceReplay \(for 'FK1-v4'\) needs packages that are not "
        r"installed: h5py and huggingface_hub are required",
    ):
        load_dataset("roboset:FK1-v4", root=tmp_path, download=False)
    assert os.listdir(tmp_path) == []

"""The one loader: the options every source shares, and TorchRL's dataset keywords."""

from __future__ import annotations

import inspect

import pytest
import torch

from mixreplay import DatasetNotFoundError, OfflineDataset, load_dataset
from mixreplay.datasets import cache
from mixreplay.datasets.memmap import write_memmap_dataset
from tests.conftest import ted_rows
from tests.datasets.conftest import PENDULUM, d4rl_arrays, write_d4rl


@pytest.fixture(params=["minari", "d4rl"])
def dataset_id(request, tmp_path):
    """An ID of each native source (a Minari dataset, a D4RL file)."""
    if request.param == "minari":
        request.getfixturevalue("minari_root")
        return f"minari:{PENDULUM}"
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    return f"d4rl:{tmp_path / 'x.hdf5'}"


def test_shared_options_mean_the_same_for_every_source(dataset_id, tmp_path):
    from mixreplay import SamplerWithoutReplacement

    seen, chunks = [], []

    def transform(td):
        seen.append(td.batch_size)
        return td

    ds = load_dataset(
        dataset_id,
        keys=["observation", "action", "next"],
        rename={"observation": "obs", ("next", "observation"): ("next", "obs")},
        dtype={("next", "reward"): "float64"},
        keep_infos=False,
        batch_size=5,
        generator=3,
        sampler=SamplerWithoutReplacement(),
        transform=transform,
        cache_dir=tmp_path / "elsewhere",
        progress=chunks.append,
    )
    assert isinstance(ds, OfflineDataset) and ds.path.is_relative_to(tmp_path / "elsewhere")
    assert ("obs",) in ds.schema and ("next", "obs") in ds.schema and ("done",) not in ds.schema
    assert ds.schema["next", "reward"].dtype == torch.float64
    assert ds.sample().batch_size == (5,) and seen == [(5,)] and sum(chunks) == len(ds)
    # refresh converts again; root is TorchRL's name for cache_dir
    again = load_dataset(
        dataset_id, root=tmp_path / "elsewhere", refresh=True, progress=chunks.append
    )
    assert again.path.parent.parent == tmp_path / "elsewhere" / "datasets"
    assert sum(chunks) == len(ds) + len(again)


def test_root_and_cache_dir_are_one_option(dataset_id, tmp_path):
    with pytest.raises(TypeError, match=r"root and cache_dir are the same option .*: pass one of"):
        load_dataset(dataset_id, root=tmp_path, cache_dir=tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"split_trajs": True},
            r"does not support TorchRL's split_trajs=True: rows stay flat .*SliceSampler",
        ),
        ({"writer": object()}, r"does not support TorchRL's writer=.*: a dataset is read-only"),
        ({"collate_fn": len}, r"does not support TorchRL's collate_fn=.*transform="),
        (
            {"env_kwarg": 1},
            r"unexpected keyword argument 'env_kwarg'; the (minari|d4rl): loader takes .*batch_size",
        ),
        ({"refresh": 1}, r"refresh must be True or False, got int 1"),
        ({"keep_infos": "yes"}, r"keep_infos must be True or False, got str 'yes'"),
    ],
)
def test_torchrl_keywords_without_a_meaning_are_refused(dataset_id, kwargs, match):
    with pytest.raises(TypeError, match=match):
        load_dataset(dataset_id, **kwargs)
    assert cache.list_cache() == []  # refused before anything was converted


def test_torchrl_defaults_are_accepted(dataset_id):
    ds = load_dataset(dataset_id, batch_size=4, split_trajs=False, writer=None, collate_fn=None)
    assert ds.sample().batch_size == (4,)


def test_prefetch_and_pin_memory_go_to_the_dataset_or_name_the_buffer(dataset_id):
    params = inspect.signature(OfflineDataset.__init__).parameters
    ds = load_dataset(dataset_id, prefetch=None, pin_memory=False)  # the defaults: always fine
    assert len(ds) > 0
    if "prefetch" in params:  # the dataset takes them: forwarded
        assert load_dataset(dataset_id, batch_size=2, prefetch=2).prefetch == 2
    else:
        with pytest.raises(
            TypeError,
            match=r"does not take prefetch=2: an OfflineDataset sampled alone has no prefetch; "
            r"pass prefetch= to the buffer that samples it",
        ):
            load_dataset(dataset_id, batch_size=2, prefetch=2)


def test_d4rl_torchrl_keywords(tmp_path):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    path = tmp_path / "x.hdf5"
    base = load_dataset(f"d4rl:{path}")
    for kwargs in (
        {"from_env": True},
        {"from_env": False},
        {"direct_download": True},
        {"use_truncated_as_done": True},
        {"terminate_on_end": True},
    ):
        assert load_dataset(f"d4rl:{path}", **kwargs).path == base.path  # the same rows
    for kwargs, match in (
        (
            {"use_truncated_as_done": False},
            r"use_truncated_as_done=False .*read \('next', 'terminated'\)",
        ),
        (
            {"terminate_on_end": False},
            r"terminate_on_end=False .*keeps every row whose next observation",
        ),
        ({"direct_download": False}, r"direct_download=False .*the d4rl package is never used"),
    ):
        with pytest.raises(TypeError, match=r"does not support TorchRL's " + match):
            load_dataset(f"d4rl:{path}", **kwargs)
    with pytest.raises(
        ValueError, match=r"download must be one of True, False, 'force', got 'yes'"
    ):
        load_dataset(f"d4rl:{path}", download="yes")


def test_minari_torchrl_keywords(minari_root, monkeypatch):
    import minari

    calls = []
    monkeypatch.setattr(minari, "download_dataset", lambda *a, **k: calls.append((a, k)))
    ds = load_dataset(f"minari:{PENDULUM}", load_from_local_minari=True, batch_size=3)
    assert ds.sample().batch_size == (3,) and calls == []
    # download="force" asks Minari to download again (then converts what is there)
    load_dataset(f"minari:{PENDULUM}", download="force")
    assert calls == [((PENDULUM,), {"force_download": True})]
    # load_from_local_minari wins over download, as in TorchRL
    with pytest.raises(DatasetNotFoundError, match="'test/absent-v0' not found"):
        load_dataset("minari:test/absent-v0", download=True, load_from_local_minari=True)
    assert len(calls) == 1


def test_memmap_takes_the_dataset_options_only(tmp_path):
    path = write_memmap_dataset(tmp_path / "ds", ted_rows(6), episode_starts=[0, 3])
    ds = load_dataset(f"memmap:{path}", batch_size=2, generator=0, split_trajs=False, writer=None)
    assert ds.sample().batch_size == (2,)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'keys'"):
        load_dataset(f"memmap:{path}", keys=["observation"])
    with pytest.raises(TypeError, match=r"split_trajs=True"):
        load_dataset(f"memmap:{path}", split_trajs=True)

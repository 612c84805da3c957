"""The dataset registry: one entry per prefix, TorchRL's rules (lazy strings, lower-cased
prefixes, KeyError on re-registration, its error words), and a source of one's own."""

from __future__ import annotations

import pytest
import torch

from mixreplay import (
    DatasetError,
    DatasetNotFoundError,
    OfflineDataset,
    list_prefixes,
    load_dataset,
    register_dataset,
)
from mixreplay.datasets import get_entry, parse_dataset_id
from mixreplay.datasets.memmap import write_memmap_dataset
from mixreplay.errors import DatasetPrefixTakenError, MissingDependencyError
from tests.conftest import ted_rows
from tests.datasets.conftest import Ramp, d4rl_arrays, write_d4rl

TORCHRL_PREFIXES = [
    "atari",
    "atari_dqn",
    "d4rl",
    "gen_dgrl",
    "lerobot",
    "minari",
    "openml",
    "openx",
    "roboset",
    "vd4rl",
]


def test_every_torchrl_prefix_and_memmap_are_registered():
    assert list_prefixes() == sorted([*TORCHRL_PREFIXES, "memmap"])


def test_native_entries_are_sources_and_memmap_a_factory():
    assert get_entry("minari").converts and get_entry("d4rl").converts
    assert not get_entry("memmap").converts
    assert get_entry("d4rl").accepts("download") and get_entry("minari").accepts("download")
    assert get_entry("d4rl").accepts("keys") and not get_entry("memmap").accepts("keys")
    assert get_entry("memmap").accepts("batch_size") and not get_entry("memmap").accepts("root")


def test_register_and_route_kwargs(registry):
    calls = []

    def factory(rest, **kwargs):
        calls.append((rest, kwargs))
        return OfflineDataset.from_tensordict(ted_rows(4))

    register_dataset("reg-test", factory)
    ds = load_dataset("reg-test:some/name-v0", batch_size=7)
    assert len(ds) == 4 and calls == [("some/name-v0", {"batch_size": 7})]


def test_prefixes_are_lower_cased_and_stripped(registry):
    register_dataset("  MyData ", lambda rest, **kw: OfflineDataset.from_tensordict(ted_rows(3)))
    assert "mydata" in list_prefixes()
    assert len(load_dataset("MYDATA:x")) == len(load_dataset(" mydata :x")) == 3


def test_a_capitalised_builtin_prefix_reaches_the_builtin(tmp_path):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    assert len(load_dataset(f"D4RL:{tmp_path / 'x.hdf5'}")) == 20
    with pytest.raises(DatasetNotFoundError, match="Minari dataset 'test/absent-v0' not found"):
        load_dataset("Minari:test/absent-v0")


def test_lazy_module_attribute_strings(registry, tmp_path):
    write_memmap_dataset(tmp_path / "ds", ted_rows(5))
    register_dataset("lazy", "mixreplay.datasets.memmap:load_memmap")
    assert get_entry("lazy").target == "mixreplay.datasets.memmap:load_memmap"
    assert len(load_dataset(f"lazy:{tmp_path / 'ds'}", batch_size=2).sample()) == 2
    # nothing is imported when registering: a broken target fails when first used
    register_dataset("broken", "mixreplay_no_such_module:loader")
    # the import's own error type (TorchRL lets it through), naming the prefix and the fix
    with pytest.raises(
        ModuleNotFoundError,
        match=r"dataset source 'broken' is registered as 'mixreplay_no_such_module:loader', "
        r"which cannot be imported \(ModuleNotFoundError: .*\); fix it with "
        r"register_dataset\('broken', \.\.\., replace=True\)",
    ):
        load_dataset("broken:x")
    register_dataset("no-attr", "mixreplay.datasets.memmap:no_such_loader")
    with pytest.raises(AttributeError, match=r"'no-attr' is registered as .*no_such_loader"):
        load_dataset("no-attr:x")


def test_reregistering_needs_replace(registry):
    register_dataset("reg-twice", lambda rest: None)
    with pytest.raises(
        DatasetPrefixTakenError,
        match=r"^dataset prefix 'reg-twice' is already registered; pass replace=True to override "
        r"it \(it opens .*\)$",
    ) as info:
        register_dataset("Reg-Twice", lambda rest: None)
    # TorchRL's type, and mixreplay's rule for a bad value
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
    with pytest.raises(
        KeyError, match=r"'minari' is already registered; .*\(it opens mixreplay.datasets"
    ):
        register_dataset("minari", lambda rest: None)
    register_dataset("minari", "mixreplay.datasets.memmap:load_memmap", replace=True)
    assert not get_entry("minari").converts


@pytest.mark.parametrize(
    "dataset_id, match",
    [
        (
            "minar:mujoco/hopper/expert-v0",
            r"Unknown dataset source 'minar' \(did you mean 'minari:'\?\)",
        ),
        ("d4lr:hopper-medium-v2", r"Unknown dataset source 'd4lr' \(did you mean 'd4rl:'\?\)"),
        ("atari-dqn:Pong/5", r"Unknown dataset source 'atari-dqn' \(did you mean 'atari_dqn:'\?\)"),
        ("nope:hopper", r"Unknown dataset source 'nope'; known prefixes: atari, atari_dqn, d4rl"),
        (
            "hopper-medium-v2",
            r"^dataset ID 'hopper-medium-v2' must be prefixed with its source: write it as "
            r"'<prefix>:<name>' with a prefix among atari, .*, vd4rl "
            r"\(did you mean 'd4rl:hopper-medium-v2'\?\)$",
        ),
        (
            "mujoco/hopper/expert-v0",
            r"must be prefixed .* \(did you mean 'minari:mujoco/hopper/expert-v0'\?\)",
        ),
        ("something", r"'something' must be prefixed with its source: .*, vd4rl$"),
        (":x", r"must be prefixed with its source"),
        (
            "d4rl:",
            r"dataset_id 'd4rl:' names no dataset after the prefix; write it as 'd4rl:<name>'",
        ),
        ("with space:x", r"Unknown dataset source 'with space' in 'with space:x'"),
    ],
)
def test_bad_ids(dataset_id, match):
    # TorchRL's words ("Unknown dataset source", "must be prefixed"), a ValueError as in TorchRL
    with pytest.raises(DatasetError, match=match) as info:
        load_dataset(dataset_id)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_a_bare_path_suggests_its_prefix(tmp_path):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    with pytest.raises(DatasetError, match=rf"did you mean 'd4rl:{tmp_path / 'x.hdf5'}'"):
        load_dataset(str(tmp_path / "x.hdf5"))
    write_memmap_dataset(tmp_path / "ds", ted_rows(3))
    with pytest.raises(DatasetError, match=rf"did you mean 'memmap:{tmp_path / 'ds'}'"):
        load_dataset(str(tmp_path / "ds"))


def test_dataset_id_must_be_a_string():
    with pytest.raises(
        TypeError, match=r"dataset_id must be a string like 'minari:<id>', got int 3"
    ):
        load_dataset(3)


@pytest.mark.parametrize("prefix", ["", "a:b", "with space", "  ", "-x", 5])
def test_bad_prefixes(prefix):
    # a non-string too is a ValueError: the type mixreplay's registry has always raised here
    with pytest.raises(ValueError, match=rf"a dataset prefix must be a non-empty word.*{prefix!r}"):
        register_dataset(prefix, lambda rest: None)
    assert list_prefixes() == sorted([*TORCHRL_PREFIXES, "memmap"])


def test_dataset_must_be_callable_or_a_target():
    with pytest.raises(
        TypeError, match=r"factory must be callable, got int 3; pass a Source class, a function"
    ):
        register_dataset("reg-bad", 3)
    with pytest.raises(ValueError, match=r"is 'module:attribute', got 'no_colon'; e\.g\. "):
        register_dataset("reg-bad", "no_colon")
    assert "reg-bad" not in list_prefixes()  # a refused call registers nothing


@pytest.mark.parametrize("spec", ["no_colon", ":attr", "module:"])
def test_bad_lazy_strings(spec):
    with pytest.raises(ValueError, match=r"a factory given as a string is 'module:attribute', got"):
        register_dataset("reg-bad-lazy", spec)
    assert "reg-bad-lazy" not in list_prefixes()


@pytest.mark.parametrize("prefix", sorted(set(TORCHRL_PREFIXES) - {"d4rl", "minari"}))
def test_torchrl_sources_need_torchrl(prefix, monkeypatch):
    """Without TorchRL installed, a TorchRL-only prefix says which extra installs it."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torchrl" else real(name, *a)
    )
    with pytest.raises(
        MissingDependencyError,
        match=rf"the dataset source '{prefix}' opens through TorchRL \(torchrl\.data\.datasets\..*"
        r"\), which is not installed\. Install it with: pip install \"mixreplay\[torchrl\]\"",
    ):
        load_dataset(f"{prefix}:some-id")


def test_parse_dataset_id_keeps_the_name_as_written():
    entry, name = parse_dataset_id("Minari:Mujoco/Hopper-v0:extra")
    assert entry.prefix == "minari" and name == "Mujoco/Hopper-v0:extra"


# -- a Source of one's own is a registered source like the built-ins ------------------------------


def test_a_registered_source_class_loads_through_the_cache(registry, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="mixreplay")
    register_dataset("ramp", Ramp)
    ds = load_dataset("ramp:10", scale=2.0, batch_size=3)
    assert ds.schema["observation"].dtype == torch.float32  # the loader's dtype policy
    assert ds[:]["observation"].squeeze(-1).tolist() == [2.0 * i for i in range(10)]
    assert ds.episode_starts.tolist() == [0, 4, 8] and ds.sample().batch_size == (3,)
    assert ds.path.parent.name == "ramp" and ds.source_id == "ramp:10"
    again = load_dataset("ramp:10", scale=2.0)
    assert again.path == ds.path
    assert sum(r.getMessage().startswith("converting ramp:10") for r in caplog.records) == 1
    # its own option is part of the cache key; the shared ones work as for minari:/d4rl:
    other = load_dataset("ramp:10", scale=1.0, keys=["observation"], dtype=None)
    assert other.path != ds.path and list(other.schema.keys()) == [("observation",)]
    assert other.schema["observation"].dtype == torch.float64
    with pytest.raises(
        TypeError, match=r"unexpected keyword argument 'scael'; the ramp: loader takes"
    ):
        load_dataset("ramp:10", scael=2.0)

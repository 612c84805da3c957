"""``dedup_next`` on converted sources (``minari:``, ``d4rl:``, a registered Source) and on
``mixreplay convert``/``inspect``: the rows read back are the plain conversion's, byte for
byte; the cache keeps the two layouts as two entries; pixel datasets take about half the disk.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from mixreplay import load_dataset
from mixreplay.datasets import cache
from mixreplay.samplers import SliceSampler
from mixreplay.storages.dedup import DedupFrozenStorage
from tests.datasets.conftest import (
    MOUNTAINCAR,
    PENDULUM,
    Ramp,
    d4rl_arrays,
    dataset_cli,
    make_minari,
    record,
    write_d4rl,
)
from tests.helpers import assert_identical

PIXELS = "test/pixels-v0"


class PixelPendulum(gym.ObservationWrapper):
    """Pendulum seen as a 16×16×3 ``uint8`` image: a fixed pattern shifted by the state."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)
        self.pattern = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.int64)

    def observation(self, obs):
        shift = int((obs[0] + 1) * 60) + int((obs[2] + 8) * 8)
        return ((self.pattern + shift) % 256).astype(np.uint8)


@pytest.fixture(scope="module")
def pixel_session(tmp_path_factory):
    """A read-only Minari dataset of pixel observations (4 episodes of 40 steps)."""
    root = tmp_path_factory.mktemp("minari_pixels")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        env = gym.wrappers.TimeLimit(PixelPendulum(gym.make("Pendulum-v1").unwrapped), 40)
        make_minari(PIXELS, env, record(env, 4, seed=3))
    return root


@pytest.fixture
def pixel_root(pixel_session, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(pixel_session))


def disk(path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def batches(ds, n: int = 4) -> list:
    return [ds.sample() for _ in range(n)]


def check_same(plain, dedup) -> None:
    """The dedup conversion holds the plain one's rows, and every row but each episode's
    last step reads its next values from the following row."""
    assert isinstance(dedup.storage, DedupFrozenStorage)
    assert not isinstance(plain.storage, DedupFrozenStorage)
    assert dedup.path != plain.path
    assert_identical(dedup.storage[:], plain.storage[:])
    assert torch.equal(dedup.episode_starts, plain.episode_starts)
    starts = plain.episode_starts.tolist()
    last_steps = [s - 1 for s in starts[1:]] + [len(plain) - 1]
    assert dedup.storage._next_slots.tolist() == last_steps
    assert dedup.metadata["dedup_next"] == [["next", "observation"]]


def open_both(dataset_id: str, **options):
    plain = load_dataset(dataset_id, batch_size=32, generator=7, **options)
    dedup = load_dataset(dataset_id, batch_size=32, generator=7, dedup_next=True, **options)
    return plain, dedup


@pytest.mark.parametrize("dataset_id", [PENDULUM, MOUNTAINCAR])
def test_minari_dedup_conversion_holds_the_plain_rows(minari_root, dataset_id):
    plain, dedup = open_both(f"minari:{dataset_id}")
    check_same(plain, dedup)
    for a, b in zip(batches(plain), batches(dedup), strict=True):
        assert_identical(a, b)


def test_minari_pixels_take_about_half_the_disk(pixel_root):
    plain, dedup = open_both(f"minari:{PIXELS}", sampler=SliceSampler(4))
    check_same(plain, dedup)
    assert dedup.schema["observation"].dtype == torch.uint8
    for a, b in zip(batches(plain), batches(dedup), strict=True):
        assert_identical(a, b)
    ratio = disk(dedup.path) / disk(plain.path)
    assert ratio < 0.6, ratio


@pytest.mark.parametrize("with_next", [True, False], ids=["stored_next", "derived_next"])
def test_d4rl_dedup_conversion_holds_the_plain_rows(tmp_path, with_next):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays(with_next=with_next))
    plain, dedup = open_both(f"d4rl:{tmp_path / 'x.hdf5'}", keep_infos=True)
    check_same(plain, dedup)
    for a, b in zip(batches(plain), batches(dedup), strict=True):
        assert_identical(a, b)


def test_d4rl_pixels_take_about_half_the_disk(tmp_path):
    g = np.random.default_rng(0)
    n, ends = 200, np.zeros(200, dtype=bool)
    ends[49::50] = True
    obs = g.integers(0, 256, (n + 1, 16, 16, 3), dtype=np.uint8)
    arrays = d4rl_arrays()
    arrays.observations, arrays.next_observations = obs[:-1], obs[1:]
    arrays.actions, arrays.rewards = np.zeros((n, 2), np.float32), np.ones(n)
    arrays.terminals, arrays.timeouts, arrays.qpos = ends, np.zeros(n, bool), np.zeros((n, 1))
    write_d4rl(tmp_path / "pix.hdf5", arrays)
    plain, dedup = open_both(f"d4rl:{tmp_path / 'pix.hdf5'}")
    check_same(plain, dedup)
    assert disk(dedup.path) / disk(plain.path) < 0.6


def test_a_registered_source_converts_with_dedup_next(registry):
    registry.register_dataset("ramp", Ramp)
    plain, dedup = open_both("ramp:12", scale=0.5)
    check_same(plain, dedup)
    assert dedup.storage._next_slots.tolist() == [3, 7, 11]


def test_the_two_variants_do_not_shadow_each_other(minari_root, capsys):
    converted = []
    progress = converted.append
    plain = load_dataset(f"minari:{PENDULUM}", progress=progress)
    dedup = load_dataset(f"minari:{PENDULUM}", dedup_next=True, progress=progress)
    assert converted == [36, 36]
    # each is a cache hit now, with its own layout
    again_plain = load_dataset(f"minari:{PENDULUM}", progress=progress)
    again_dedup = load_dataset(f"minari:{PENDULUM}", dedup_next=True, progress=progress)
    assert converted == [36, 36]
    assert again_plain.path == plain.path and again_dedup.path == dedup.path
    assert not isinstance(again_plain.storage, DedupFrozenStorage)
    assert isinstance(again_dedup.storage, DedupFrozenStorage)
    entries = cache.list_cache()
    assert sorted((e.source_id, e.variant) for e in entries) == [
        (f"minari:{PENDULUM}", "float32"),
        (f"minari:{PENDULUM}", "float32, dedup_next"),
    ]
    assert dataset_cli(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "float32, dedup_next" in out and "2 entries" in out
    # refreshing one variant leaves the other alone
    load_dataset(f"minari:{PENDULUM}", dedup_next=True, refresh=True, progress=progress)
    assert converted == [36, 36, 36]
    assert load_dataset(f"minari:{PENDULUM}", progress=progress).path == plain.path
    assert converted == [36, 36, 36]


def test_plain_conversions_keep_their_cache_key(tmp_path):
    # dedup_next=False is the default: the same entry, not a new variant of it
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    a = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    b = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", dedup_next=False)
    assert a.path == b.path
    assert "dedup_next" not in a.metadata["info"]["options"]


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_bad_dedup_next_is_a_type_error(minari_root, tmp_path, registry, value):
    shown = {"yes": "str 'yes'", 1: "int 1", None: "NoneType None"}[value]
    match = f"^dedup_next must be True or False, got {shown}$"
    with pytest.raises(TypeError, match=match):
        load_dataset(f"minari:{PENDULUM}", dedup_next=value)
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    with pytest.raises(TypeError, match=match):
        load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", dedup_next=value)
    # checked before the file is looked for (or downloaded): no DatasetNotFoundError
    with pytest.raises(TypeError, match=match):
        load_dataset("d4rl:hopper-medium-v2", dedup_next=value, download=False)
    registry.register_dataset("ramp", Ramp)
    with pytest.raises(TypeError, match=match):
        registry.get_entry("ramp").source("4", dedup_next=value)
    with pytest.raises(TypeError, match=match):  # built directly, without the loader
        Ramp("4", prefix="ramp", dedup_next=value)
    assert cache.list_cache() == []  # nothing was converted


def test_convert_dedup_next_then_open_as_memmap(minari_root, tmp_path, capsys):
    dest = tmp_path / "pendulum"
    assert dataset_cli(["convert", f"minari:{PENDULUM}", str(dest), "--dedup-next"]) == 0
    assert "(next values stored once)" in capsys.readouterr().out
    ds = load_dataset(f"memmap:{dest}", batch_size=16, generator=3)
    plain = load_dataset(f"minari:{PENDULUM}", batch_size=16, generator=3)
    check_same(plain, ds)
    for a, b in zip(batches(plain), batches(ds), strict=True):
        assert_identical(a, b)
    # convert wrote DEST, not the cache (which holds the plain conversion opened above)
    assert [e.variant for e in cache.list_cache()] == ["float32"]
    # a copied dataset (memmap:, a factory's) is written with the flag too
    assert dataset_cli(["convert", f"memmap:{dest}", str(tmp_path / "copy")]) == 0
    copy = load_dataset(f"memmap:{tmp_path / 'copy'}")
    assert not isinstance(copy.storage, DedupFrozenStorage)
    assert dataset_cli(["convert", f"memmap:{dest}", str(tmp_path / "back"), "--dedup-next"]) == 0
    back = load_dataset(f"memmap:{tmp_path / 'back'}")
    check_same(copy, back)


def test_convert_d4rl_pixels_with_and_without_the_flag(tmp_path):
    g = np.random.default_rng(1)
    arrays = d4rl_arrays()
    n = arrays.observations.shape[0]
    arrays.observations = g.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8)
    arrays.next_observations = None  # derived from the next row
    write_d4rl(tmp_path / "x.hdf5", arrays)
    assert dataset_cli(["convert", f"d4rl:{tmp_path / 'x.hdf5'}", str(tmp_path / "plain")]) == 0
    argv = ["convert", f"d4rl:{tmp_path / 'x.hdf5'}", str(tmp_path / "dedup"), "--dedup-next"]
    assert dataset_cli(argv) == 0
    plain = load_dataset(f"memmap:{tmp_path / 'plain'}")
    dedup = load_dataset(f"memmap:{tmp_path / 'dedup'}")
    check_same(plain, dedup)
    assert disk(tmp_path / "dedup") < disk(tmp_path / "plain")


def test_inspect_dedup_next(minari_root, tmp_path, capsys):
    assert dataset_cli(["inspect", f"minari:{PENDULUM}", "--dedup-next"]) == 0
    out = capsys.readouterr().out
    assert "stored once   ('next', 'observation') (dedup_next" in out
    assert "rows          36" in out
    assert [e.variant for e in cache.list_cache()] == ["float32, dedup_next"]
    assert dataset_cli(["inspect", f"minari:{PENDULUM}"]) == 0
    assert "stored once" not in capsys.readouterr().out
    # memmap: is read as written: the flag is for conversions
    dest = tmp_path / "p"
    assert dataset_cli(["convert", f"minari:{PENDULUM}", str(dest)]) == 0
    from mixreplay import DatasetError

    with pytest.raises(DatasetError, match=r"^--dedup-next does not apply to memmap: IDs"):
        dataset_cli(["inspect", f"memmap:{dest}", "--dedup-next"])
